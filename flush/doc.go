// Package flush copies one checkpoint file from the node-local cache to its
// destination on the parallel file system, the way the transfer daemon needs
// it done:
//
//   - durable: progress is reported (through a commit callback) only after
//     the bytes are fsynced at the destination, and the destination appears
//     under its final name only once it is complete and durable;
//   - resumable: the partial copy lives next to the destination (TempPath)
//     and no reported offset ever exceeds what a later resume finds there;
//   - the daemon's own: a partial copy is created 0600 and only as a new
//     file, carries a record of its owner (Options.Owner), of a token of
//     the copy writing it and of its last commit, and is never written,
//     resumed or removed by another owner; a copy whose record changed
//     under it claims nothing, and a resume starts from 0 when the partial
//     copy is not, byte for byte, what the last commit made durable;
//   - throttled: a Throttle shared by all copies of a daemon limits the
//     bandwidth (a token bucket over the bytes copied, which starts empty
//     and does not fill while no copy is under way) and PERCENT, the share
//     of wall-clock time the daemon spends working: every moment of a copy
//     that is not a throttle pause (reading, writing, fsyncing, verifying,
//     committing progress) is working time, and pauses keep it to PERCENT
//     of the time, as a duty cycle of about 8 ms of work and the pause it
//     owes (at least 5 ms). A pause never
//     stands between fsynced bytes and their commit;
//   - sparse: holes in the source are not written, only recreated;
//   - batched: small files copied into a Batch are made durable together
//     (one syncfs per local file system where it reports write-back
//     errors, an fsync per file elsewhere), then published, then recorded
//     by the caller in one update. A fresh copy in a Batch is written to an
//     unnamed file (O_TMPFILE) and linked under its name once durable: one
//     change of the destination directory per file instead of two.
//
// The package is Linux only: it relies on SEEK_DATA/SEEK_HOLE,
// sync_file_range, posix_fadvise, O_NOFOLLOW and, where the file system has
// it, O_TMPFILE.
package flush
