// Command scr-transferd drains checkpoints from node-local storage to the
// parallel file system in the background, driven by SCR's transfer file:
//
//	scr-transferd [flags] TRANSFERFILE
//
// It is launched like SCR's scr_transfer (one per node) and honours
// SCR_TRANSFER_SECS and SCR_FILE_BUF_SIZE from the environment; flags
// override them.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/scr-transferd/scr-transferd/daemon"
	"github.com/scr-transferd/scr-transferd/flush"
	"github.com/scr-transferd/scr-transferd/hashfile"
	"github.com/scr-transferd/scr-transferd/internal/cliflag"
	"github.com/scr-transferd/scr-transferd/internal/logging"
	"github.com/scr-transferd/scr-transferd/internal/prio"
	"github.com/scr-transferd/scr-transferd/internal/units"
	"github.com/scr-transferd/scr-transferd/internal/version"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// options are the command line after environment defaults.
type options struct {
	cfg       daemon.Config
	locking   string
	verify    string
	logFormat string
	logLevel  string
	log       *zap.Logger
	nice      int
	ioIdle    bool
	metrics   string
	bw        string // --bw: "auto" or ""
	version   bool   // --version: print the version and exit
}

// usageError is a mistake on the command line: run prints it on one line
// with a hint, not the whole usage.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

// parse reads the command line; flags may come before or after
// TRANSFERFILE. --help prints the usage to stdout and returns flag.ErrHelp.
func parse(args []string, stdout io.Writer) (*options, error) {
	o, fs, err := flags()
	if err != nil {
		return nil, err
	}
	pos, err := cliflag.Parse(fs, args)
	if errors.Is(err, flag.ErrHelp) {
		usage(stdout, fs)
		return nil, err
	}
	if err != nil {
		return nil, usageError{cliflag.Explain(fs, err)}
	}
	if o.version {
		return o, nil
	}
	if len(pos) != 1 {
		return nil, usageError{fmt.Sprintf("want exactly one TRANSFERFILE, got %d arguments %q", len(pos), pos)}
	}
	o.cfg.TransferFile = pos[0]
	if o.cfg.Locking, err = hashfile.ParseLocking(o.locking); err != nil {
		return nil, usageError{err.Error()}
	}
	if o.cfg.Verify, err = daemon.ParseVerify(o.verify); err != nil {
		return nil, usageError{err.Error()}
	}
	switch o.bw {
	case "auto":
		o.cfg.BWAuto = true
	case "":
	default:
		return nil, usageError{fmt.Sprintf("--bw %q: want auto (BW itself comes from the transfer file)", o.bw)}
	}
	if o.nice < 0 || o.nice > 19 {
		return nil, usageError{fmt.Sprintf("--nice %d: want 0 to 19", o.nice)}
	}
	return o, nil
}

// usage is the text of --help.
func usage(w io.Writer, fs *flag.FlagSet) { help().Text(w, fs) }

// flags defines the daemon's flags, with defaults from the environment.
func flags() (*options, *flag.FlagSet, error) {
	o := &options{}
	fs := flag.NewFlagSet("scr-transferd", flag.ContinueOnError)
	fs.SetOutput(io.Discard) // run reports errors itself, on one line
	fs.Usage = func() {}
	reread, err := envSeconds("SCR_TRANSFER_SECS", 60*time.Second)
	if err != nil {
		return nil, nil, err
	}
	bufSize, err := envBytes("SCR_FILE_BUF_SIZE", flush.DefaultBufSize)
	if err != nil {
		return nil, nil, err
	}
	fs.StringVar(&o.locking, "locking", "flock", "transfer-file lock: flock or fcntl (as KVTree was built)")
	fs.DurationVar(&o.cfg.FcntlSettle, "fcntl-settle", 100*time.Millisecond, "with --locking=fcntl, after a change the daemon did not make, wait at most this long for the library's read that follows before locking the transfer file (SCR <= 1.2 fails on a busy fcntl lock)")
	fs.BoolVar(&o.cfg.CreateDir, "create-dir", false, "create the transfer file's directory if it does not exist (by default a missing directory is refused as a mistyped path)")
	fs.BoolVar(&o.cfg.StrictModes, "strict-modes", false, "refuse a group-writable transfer file or control directory too")
	fs.DurationVar(&o.cfg.Reread, "reread", reread, "read the transfer file at least this often (SCR_TRANSFER_SECS)")
	fs.DurationVar(&o.cfg.Poll, "poll", time.Second, "check the transfer file's metadata this often on network, cluster and FUSE file systems, where inotify misses other nodes' writes")
	units.IntVar(fs, &o.cfg.Flush.BufSize, "buf-size", bufSize, 1, maxBufSize, "bytes read and written at once (SCR_FILE_BUF_SIZE)")
	units.Int64Var(fs, &o.cfg.Flush.SyncBytes, "sync-bytes", flush.DefaultSyncBytes, 1, math.MaxInt64, "fsync the destination and record WRITTEN after this many bytes")
	fs.DurationVar(&o.cfg.Flush.SyncInterval, "sync-interval", flush.DefaultSyncInterval, "... or after this long, whichever comes first")
	fs.StringVar(&o.bw, "bw", "", "auto: set the copy rate from the latency of the destination's writes and fsyncs, yielding when others queue there; the transfer file's BW is then its ceiling")
	fs.IntVar(&o.cfg.Streams, "streams", daemon.DefaultStreams, "small files of a batch copied at once, sharing BW and PERCENT")
	fs.BoolVar(&o.cfg.Flush.SyncEach, "sync-each", false, "fsync each small file of a batch instead of one syncfs per local file system (ext4, XFS, btrfs, F2FS, tmpfs on Linux 5.8+)")
	fs.BoolVar(&o.cfg.Flush.DropCache, "drop-cache", true, "drop copied pages from the page cache on both sides once durable (files of 1 MiB or more)")
	fs.StringVar(&o.verify, "verify", "before", "checkpoint checks: off, before (identify and check the format before copying), after (re-read the durable copy and compare CRC32), both")
	fs.DurationVar(&o.cfg.RetryMin, "retry-min", time.Second, "first back-off after a file fails or the transfer file cannot be used; it doubles with each failure, and each wait is drawn at random between half and all of it")
	fs.DurationVar(&o.cfg.RetryMax, "retry-max", time.Minute, "longest back-off between attempts on a failing file")
	fs.DurationVar(&o.cfg.ProgressEvery, "progress-interval", 30*time.Second, "log a progress line for the file being copied this often (0: never)")
	fs.StringVar(&o.logFormat, "log-format", "console", "log format: console (sizes and rates in KiB, MiB, GiB) or json (raw bytes, bytes/s, seconds)")
	fs.StringVar(&o.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	fs.BoolVar(&o.cfg.Insecure, "insecure", false, "accept a transfer file or control directory owned by another user or writable by group/other")
	fs.Func("allow-src", "only read sources under this directory (repeatable)", func(s string) error {
		o.cfg.AllowSrc = append(o.cfg.AllowSrc, s)
		return nil
	})
	fs.Func("allow-dest", "only write destinations under this directory (repeatable)", func(s string) error {
		o.cfg.AllowDest = append(o.cfg.AllowDest, s)
		return nil
	})
	fs.IntVar(&o.nice, "nice", 0, "add this to the process's nice value (0-19)")
	fs.BoolVar(&o.ioIdle, "io-idle", false, "use the idle I/O scheduling class (ioprio)")
	fs.StringVar(&o.metrics, "metrics-file", "", "write Prometheus metrics to this file (node_exporter textfile collector, *.prom), replaced atomically")
	fs.BoolVar(&o.version, "version", false, "print the version (module version and VCS revision) and exit")
	return o, fs, nil
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 1 && args[0] == "--help-man" {
		// Hidden: the manual page, made from the --help text
		// (docs/man/scr-transferd.1).
		return manPage(stdout)
	}
	o, status, ok := setup(args, stdout, stderr)
	if !ok {
		return status
	}
	vi := version.Get()
	if o.version {
		fmt.Fprintln(stdout, "scr-transferd", vi)
		return 0
	}
	// Before anything else: on success this re-executes the program with
	// the lowered priority, which every thread then inherits.
	prioSettings := prio.Settings{Nice: o.nice, IOIdle: o.ioIdle}
	_, prioErr := prio.Lower(prioSettings)
	log := o.log
	defer func() { _ = log.Sync() }()
	log.Info("scr-transferd starting", zap.String("version", vi.Version), zap.String("revision", vi.Revision),
		zap.Bool("modified", vi.Modified), zap.String("go", vi.GoVersion), zap.Int("pid", os.Getpid()))
	checkConfinement(log, o.cfg.AllowSrc, o.cfg.AllowDest)
	if prioErr != nil {
		log.Warn("cannot lower the priority of every thread", zap.Stringer("wanted", prioSettings), zap.Error(prioErr))
	} else if o.nice > 0 || o.ioIdle {
		log.Info("priority lowered on every thread", zap.Int("nice_added", o.nice), zap.Bool("io_idle", o.ioIdle))
	}
	return serve(o)
}

// setup parses the command line and makes the logger. It returns ok false
// with the exit status when the program must end here: after --help, or
// on a mistake (status 2, said on stderr).
func setup(args []string, stdout, stderr io.Writer) (o *options, status int, ok bool) {
	o, err := parse(args, stdout)
	if errors.Is(err, flag.ErrHelp) {
		return nil, 0, false
	}
	if err == nil {
		if o.log, err = logging.New(o.logFormat, o.logLevel, stderr); err != nil {
			err = usageError{err.Error()}
		}
	}
	var ue usageError
	if errors.As(err, &ue) {
		fmt.Fprintf(stderr, "scr-transferd: %v\n(scr-transferd --help lists the flags)\n", err)
		return nil, exitUsage, false
	}
	if err != nil {
		fmt.Fprintf(stderr, "scr-transferd: %v\n", err)
		return nil, exitUsage, false
	}
	return o, 0, true
}

// serve runs the daemon with its service manners (sd_notify, the metrics
// file) until it ends, and returns the exit status: 0, or the status of
// the reason it could not start or go on.
func serve(o *options) int {
	log := o.log
	o.cfg.Log = log
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if o.metrics != "" {
		o.cfg.Protect = append(o.cfg.Protect, absPath(o.metrics))
	}
	svc := startService(log, absPath(o.cfg.TransferFile), o.metrics)
	defer svc.close()
	o.cfg.OnStatus = svc.onStatus
	o.cfg.Heartbeat = svc.beat
	context.AfterFunc(ctx, svc.stopping)
	d, err := daemon.Start(ctx, o.cfg)
	if err != nil {
		svc.stopping()
		log.Error("cannot start", zap.Error(err))
		return startFailureStatus(err)
	}
	<-d.Done()
	svc.stopping()
	if err := d.Err(); err != nil {
		// Another process took the instance lock: it serves the transfer
		// file now, and a restart of this one could not.
		log.Error("stopped: cannot go on", zap.Error(err))
		return startFailureStatus(err)
	}
	return 0
}

// envSeconds reads a number of seconds from the environment, as SCR's
// parameters are given.
func envSeconds(name string, def time.Duration) (time.Duration, error) {
	s, ok := os.LookupEnv(name)
	if !ok || strings.TrimSpace(s) == "" {
		return def, nil
	}
	f, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
	if err != nil || f <= 0 {
		return 0, fmt.Errorf("%s=%q: want a positive number of seconds", name, s)
	}
	return time.Duration(f * float64(time.Second)), nil
}

// maxBufSize is the largest --buf-size: a read or write of more is split
// by the kernel anyway.
const maxBufSize = 1 << 31

// envBytes reads a byte count from the environment, with SCR's optional
// KB/MB/GB suffixes (powers of 1024).
func envBytes(name string, def int) (int, error) {
	s, ok := os.LookupEnv(name)
	if !ok || strings.TrimSpace(s) == "" {
		return def, nil
	}
	n, err := units.ParseCount(s, 1, maxBufSize)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", name, err)
	}
	return int(n), nil
}

// checkConfinement says at start, once, when --allow-src/--allow-dest
// cannot work because openat2 is refused (systemd's RestrictSUIDSGID=yes
// does so): every file would fail with the same error.
func checkConfinement(log *zap.Logger, prefixes ...[]string) {
	for _, ps := range prefixes {
		for _, p := range ps {
			if err := flush.CheckConfinement(p); errors.Is(err, flush.ErrNoOpenat2) {
				log.Error("confined files cannot be opened: every file will fail", zap.Error(err))
				return
			}
		}
	}
}
