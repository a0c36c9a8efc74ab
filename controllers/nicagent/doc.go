// Package nicagent is isochron's NIC agent, one per node (DaemonSet isochron-nic-agent):
// it programs the egress of the node's RT uplinks from the CrawlerVMs placed on the node,
// as the RTvNIC study's hypervisor scheduled its RT vNICs: a class per RT-NIC with its
// minimum bandwidth guaranteed, priority by deadline class (internal/rtnet), best-effort
// traffic last, packets classified by the RT-NIC's MAC and marked with the class's DSCP
// on the host. Desired is the pure part; the Reconciler reads the API and hands the
// result to a Programmer (netlink on a node, a recording one in tests).
package nicagent
