package render

import "time"

// DSCPClass is a DiffServ code point chosen for an RT-NIC's traffic.
type DSCPClass struct {
	// Name is the per-hop behaviour's name (EF, AF41...).
	Name string
	// Value is the 6-bit code point.
	Value int
}

// DSCPForDeadline maps an RT-NIC deadline to the DSCP class that marks its traffic. The
// shorter the deadline, the higher the class, as the RTvNIC study does:
//
//	deadline <= 5ms    EF   (46)  expedited forwarding: real-time control traffic
//	deadline <= 20ms   AF41 (34)  low-latency, low-loss interactive traffic
//	deadline <= 100ms  AF31 (26)
//	longer             AF21 (18)  still above best effort (CS0)
//
// Switches that honour DiffServ (strict priority for EF, weighted queues for the AF
// classes) then keep the crawler's requests ahead of bulk traffic on shared links.
func DSCPForDeadline(d time.Duration) DSCPClass {
	switch {
	case d <= 5*time.Millisecond:
		return DSCPClass{"EF", 46}
	case d <= 20*time.Millisecond:
		return DSCPClass{"AF41", 34}
	case d <= 100*time.Millisecond:
		return DSCPClass{"AF31", 26}
	default:
		return DSCPClass{"AF21", 18}
	}
}
