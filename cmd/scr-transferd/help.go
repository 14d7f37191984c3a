package main

import (
	"fmt"
	"io"

	"github.com/scr-transferd/scr-transferd/internal/cliflag"
)

// help is the daemon's --help, and its manual page.
func help() cliflag.Help {
	return cliflag.Help{
		Name:     "scr-transferd",
		Synopsis: "[flags] TRANSFERFILE",
		Summary:  "drain SCR checkpoints from node-local storage to the parallel file system",
		Description: `Copies every FILES entry of SCR's transfer file with WRITTEN < SIZE to its
DESTINATION while the file says COMMAND RUN, throttled by BW and PERCENT, and
records WRITTEN as the bytes become durable, ERROR when a file cannot be
flushed, and FLAG DONE when every file is. One daemon serves one transfer
file; SCR starts it as scr_transfer (one per node), or systemd and Slurm do
(deploy/). Flags may come before or after TRANSFERFILE; -- ends them.

Sizes: a number of bytes or with a unit, as 4M or 1MB. K, M, G, T, P are
powers of 1024 as in SCR's parameters; KB and KiB, MB and MiB... mean the same.
Durations: 500ms, 30s, 5m, 1h.`,
		Placeholders: map[string]string{
			"locking": "MODE", "verify": "MODE", "bw": "MODE", "log-format": "FORMAT", "log-level": "LEVEL",
			"allow-src": "DIR", "allow-dest": "DIR", "metrics-file": "FILE", "streams": "N", "nice": "N",
		},
		Sections: []cliflag.Section{
			{Title: "Environment", Body: `  SCR_TRANSFER_SECS   default of --reread, in seconds (as SCR's parameter)
  SCR_FILE_BUF_SIZE   default of --buf-size, a size such as 1MB
  JOURNAL_STREAM      set by systemd: when it names standard error, each log
                      line carries its syslog priority (journalctl -p err)`},
			{Title: "Examples", Body: `Serve the job's transfer file, confined to the cache and the project's space:
  scr-transferd --allow-src /dev/shm --allow-dest /p/lustre/$USER /dev/shm/$USER/scr.$SLURM_JOB_ID/transfer.scrinfo

Larger copy buffers, fewer syncs, JSON logs, metrics for node_exporter:
  scr-transferd --buf-size 4M --sync-bytes 256M --log-format json \
      --metrics-file /var/lib/prometheus/node-exporter/scr-transferd.prom \
      /dev/shm/scr.1001/transfer.scrinfo

Yield to the application, and create the control directory if it is missing:
  scr-transferd --nice 10 --io-idle --create-dir /dev/shm/scr.1001/transfer.scrinfo

Drive and watch it with scr-ctl:
  scr-ctl run TRANSFERFILE; scr-ctl status --watch TRANSFERFILE`},
			{Title: "Exit status", Body: `  0   COMMAND EXIT obeyed, or SIGTERM or SIGINT (STATE EXITING recorded)
  1   could not start: the transfer file, its directory or the instance
      lock is unusable (the log says which)
  2   the command line or the environment is wrong
  3   another daemon already serves TRANSFERFILE (not restarted by the
      shipped units)
  4   permission denied, or the control directory refused (not restarted
      by the shipped units)`},
			{Title: "See also", Body: "scr-ctl(1); the README and deploy/systemd/README.md of scr-transferd."},
		},
	}
}

// manPage writes the manual page made from the --help text.
func manPage(w io.Writer) int {
	_, fs, err := flags()
	if err != nil {
		fmt.Fprintf(w, "scr-transferd: %v\n", err)
		return 2
	}
	help().Man(w, fs, "scr-transferd")
	return 0
}
