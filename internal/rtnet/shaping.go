package rtnet

import "time"

// What the uplink's schedule is shaped to, which the NIC agent programs (internal/nic)
// and the contention model's NIC term assumes.

// ShapedRate is the rate the agent shapes an uplink of line rate line (bits/s) to: 95%
// of it. HTB counts neither the per-frame overhead on the wire (preamble, gap, FCS) nor
// what the NIC's ring already holds; shaping a little below the line keeps the queue in
// HTB, where the classes order it (the network lab measured RT averages doubling at
// 100%: docs/dev/netlab.md).
func ShapedRate(line int64) int64 { return line * 95 / 100 }

// BurstTime is how far ahead of its rate an HTB class may send in one go: a class's
// bucket is its rate over BurstTime, at least one maximum frame.
const BurstTime = 100 * time.Microsecond

// MaxFrameBytes is the largest Ethernet frame as the qdiscs count it (1500 B of payload,
// the header, a VLAN tag).
const MaxFrameBytes = 1518

// BucketBytes is the HTB bucket of a class of rate bits/s. A real-time packet may find
// that much of a class that is within its rate released ahead of it, besides the frame
// on the wire: best effort's bucket is in the model's worst case.
func BucketBytes(rate int64) int64 {
	return max(MaxFrameBytes, rate/8*int64(BurstTime)/int64(time.Second))
}
