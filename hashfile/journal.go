package hashfile

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// The journal makes the in-place rewrite whole whatever instant its
// writer dies. The kernel cuts a write of several pages short when SIGKILL
// arrives (it checks for a fatal signal before each page), so a rewrite in
// place killed half-way leaves the start of the new image over the tail of
// the old one, which neither the daemon nor KVTree can decode. Before such
// a rewrite, the bytes about to be written are recorded durably in the
// journal beside the file; a reader that finds the file undecodable
// rebuilds the new image from the file's untouched prefix and the journal,
// and keeps it only if it decodes to exactly the image recorded (its CRC,
// which covers every byte, equal to the one the journal names). After the
// rewrite the record is marked done, so that it can never be applied over
// a later version of the file written by someone else.
//
// Record layout (big-endian):
//
//	0  uint32 journalMagic
//	4  uint32 state: journalPending or journalDone (outside the CRC)
//	8  uint64 from: where the new image first differs from the old one
//	16 uint64 size of the new image
//	24 uint32 the new image's own CRC32 (its last four bytes)
//	28 uint32 CRC32 of bytes 8..28 and of the tail
//	32 the new image's bytes from..size
//
// The journal file is never made shorter: the blocks it holds stay its own,
// so that on a full control file system (SCR's /dev/shm, which the cache
// fills) a record no longer than an earlier one still fits. Bytes beyond the
// record are ignored.
const (
	journalMagic   uint32 = 0x5343524a // "SCRJ"
	journalPending uint32 = 1
	journalDone    uint32 = 0
	journalHeader         = 32
	// journalPage is the unit a kill cannot split: a rewrite whose bytes
	// lie within one such aligned page is written by the kernel whole or
	// not at all, and needs no journal.
	journalPage = 4096
)

// JournalPath returns the journal of the hash file at path:
// ".<base>.journal" in the same directory.
func JournalPath(path string) string {
	dir, base := filepath.Split(path)
	return filepath.Join(dir, "."+base+".journal")
}

// needsJournal reports whether rewriting bytes from..end of a file in place
// can be torn by a kill: they span more than one page.
func needsJournal(from, end int) bool {
	return from < end && from/journalPage != (end-1)/journalPage
}

// journalHead returns the header of the record of a rewrite of img from
// from; the record is the header followed by img[from:].
func journalHead(img []byte, from int) [journalHeader]byte {
	var h [journalHeader]byte
	binary.BigEndian.PutUint32(h[0:], journalMagic)
	binary.BigEndian.PutUint32(h[4:], journalPending)
	binary.BigEndian.PutUint64(h[8:], uint64(from))
	binary.BigEndian.PutUint64(h[16:], uint64(len(img)))
	binary.BigEndian.PutUint32(h[24:], imageCRC(img))
	c := crc32.ChecksumIEEE(h[8:28])
	binary.BigEndian.PutUint32(h[28:], crc32.Update(c, crc32.IEEETable, img[from:]))
	return h
}

// imageCRC returns the CRC an image carries in its last four bytes.
func imageCRC(img []byte) uint32 {
	if len(img) < crcSize {
		return 0
	}
	return binary.BigEndian.Uint32(img[len(img)-crcSize:])
}

func journalCRC(rec []byte) uint32 {
	c := crc32.ChecksumIEEE(rec[8:28])
	return crc32.Update(c, crc32.IEEETable, rec[journalHeader:])
}

// journalRecord is a decoded pending record.
type journalRecord struct {
	from, size int
	crc        uint32
	tail       []byte
}

// decodeJournal returns the pending record in b, or an error saying why
// there is none to apply (done, torn, foreign bytes). Every length is
// bounded by the bytes present.
func decodeJournal(b []byte) (journalRecord, error) {
	if len(b) < journalHeader {
		return journalRecord{}, fmt.Errorf("journal of %d bytes, shorter than its header", len(b))
	}
	if binary.BigEndian.Uint32(b[0:]) != journalMagic {
		return journalRecord{}, errors.New("not a journal (bad magic)")
	}
	if binary.BigEndian.Uint32(b[4:]) != journalPending {
		return journalRecord{}, errJournalDone
	}
	from := binary.BigEndian.Uint64(b[8:])
	size := binary.BigEndian.Uint64(b[16:])
	if from > size || size < HeaderSize+crcSize || size-from > uint64(len(b)-journalHeader) {
		return journalRecord{}, fmt.Errorf("journal record (from %d, size %d) does not fit its %d bytes", from, size, len(b))
	}
	rec := b[:journalHeader+int(size-from)]
	if journalCRC(rec) != binary.BigEndian.Uint32(b[28:]) {
		return journalRecord{}, errors.New("journal record fails its CRC (torn)")
	}
	return journalRecord{from: int(from), size: int(size), crc: binary.BigEndian.Uint32(b[24:]), tail: rec[journalHeader:]}, nil
}

// errJournalDone is a record whose rewrite completed.
var errJournalDone = errors.New("journal record already applied")

// rollForward returns the image a rewrite recorded in r leaves when it
// completes over file, the file's bytes as found, or an error if the file
// is not the one that rewrite started from: the image must hold the CRC r
// names and decode. The result is a new slice.
func rollForward(file []byte, r journalRecord) ([]byte, error) {
	if r.from > len(file) {
		return nil, fmt.Errorf("journal record starts at %d, beyond the file's %d bytes", r.from, len(file))
	}
	img := make([]byte, 0, r.size)
	img = append(img, file[:r.from]...)
	img = append(img, r.tail...)
	if crc32.ChecksumIEEE(img[:len(img)-crcSize]) != r.crc || imageCRC(img) != r.crc {
		return nil, errors.New("journal record does not complete this file (another version of it)")
	}
	if _, err := Decode(img); err != nil {
		return nil, fmt.Errorf("journal record completes to an undecodable image: %w", err)
	}
	return img, nil
}

// journal writes and reads the journal file of one Store.
type journal struct {
	path string
}

// open opens the journal without following a symbolic link and refuses
// anything but a regular file that no one else may write, owned by this
// process's user or by owner, the hash file's: a journal puts bytes into
// the hash file.
func (j *journal) open(flags int, owner uint32) (*os.File, error) {
	f, err := os.OpenFile(j.path, flags|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("journal %s: %w", j.path, err)
	}
	var st unix.Stat_t
	err = unix.Fstat(int(f.Fd()), &st)
	switch {
	case err != nil:
	case st.Mode&unix.S_IFMT != unix.S_IFREG:
		err = errors.New("not a regular file")
	case st.Uid != uint32(os.Geteuid()) && st.Uid != owner:
		err = fmt.Errorf("owned by uid %d, neither this process's (%d) nor the hash file's (%d)", st.Uid, os.Geteuid(), owner)
	case st.Mode&0o022 != 0:
		err = fmt.Errorf("writable by others (mode %04o)", st.Mode&0o7777)
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("journal %s: %w", j.path, err)
	}
	return f, nil
}

// record writes, and makes durable, the record of a rewrite of img from
// from, before the rewrite touches the file. It returns the open journal,
// to be marked done once the rewrite is durable.
func (j *journal) record(img []byte, from int, owner uint32) (*os.File, error) {
	f, err := j.open(os.O_RDWR|os.O_CREATE, owner)
	if err != nil {
		return nil, err
	}
	// The tail is written from img itself: a copy of it would double the
	// heap the largest transfer files need.
	head := journalHead(img, from)
	_, err = f.WriteAt(img[from:], journalHeader)
	if err == nil {
		_, err = f.WriteAt(head[:], 0)
	}
	if err != nil {
		j.done(f) // whatever part of the record was written is not to be applied
		return nil, fmt.Errorf("journal %s: %w", j.path, err)
	}
	if err := unix.Fdatasync(int(f.Fd())); err != nil {
		f.Close()
		return nil, fmt.Errorf("journal %s: sync: %w", j.path, err)
	}
	return f, nil
}

// done marks the record in f applied and closes f. It needs no sync: a
// record left pending by a crash is applied only to a file that does not
// decode, and the rewrite it describes is durable by then.
func (j *journal) done(f *os.File) {
	var st [4]byte
	binary.BigEndian.PutUint32(st[:], journalDone)
	_, _ = f.WriteAt(st[:], 4)
	f.Close()
}

// recover returns the image the pending journal record completes over
// file, the bytes of a file that does not decode, and where it first
// differs from them, or an error saying why there is none.
func (j *journal) recover(file []byte, owner uint32) ([]byte, int, error) {
	f, err := j.open(os.O_RDONLY, owner)
	if err != nil {
		return nil, 0, err
	}
	defer f.Close()
	b, err := readAll(f, nil)
	if err != nil {
		return nil, 0, fmt.Errorf("journal %s: %w", j.path, err)
	}
	r, err := decodeJournal(b)
	if err != nil {
		return nil, 0, fmt.Errorf("journal %s: %w", j.path, err)
	}
	img, err := rollForward(file, r)
	if err != nil {
		return nil, 0, fmt.Errorf("journal %s: %w", j.path, err)
	}
	return img, r.from, nil
}
