package daemon

import (
	"github.com/scr-transferd/scr-transferd/flush/autobw"
	"github.com/scr-transferd/scr-transferd/internal/logging"
)

// logAuto logs BW auto's rate in force, averaged over a few seconds, when
// it changed by a quarter or more since it was last logged: the rate
// itself moves every few milliseconds as others come and go at the
// destination. It is called once a second while copying.
func (d *daemon) logAuto() {
	r := d.throttle.AutoRate()
	if r <= 0 || !autobw.Significant(d.autoLogged, r) {
		return
	}
	bw := 0.0
	if d.limits != nil {
		bw = d.limits.bw
	}
	d.log.Info("bw auto rate", logging.Rate("rate", r), limitField("ceiling", bw, logging.Rate("ceiling", bw)))
	d.autoLogged = r
}
