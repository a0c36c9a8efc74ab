package nicagent

import (
	"net"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	isov1 "isochron.io/isochron/api/v1alpha1"
	"isochron.io/isochron/internal/render"
)

func nad(ns, name, config string, annotations map[string]string) nadv1.NetworkAttachmentDefinition {
	return nadv1.NetworkAttachmentDefinition{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Annotations: annotations},
		Spec:       nadv1.NetworkAttachmentDefinitionSpec{Config: config},
	}
}

// placed is a crawler placed on node with an RT-NIC on network (none when "").
func placed(ns, name, node, network string, deadline time.Duration) isov1.CrawlerVM {
	c := isov1.CrawlerVM{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID("uid-" + name)}}
	if network != "" {
		c.Spec.RTNIC = &isov1.RTNIC{NetworkName: network, Deadline: metav1.Duration{Duration: deadline}, MinBandwidth: resource.MustParse("10M")}
	}
	if node != "" {
		c.Status.Sizing = &isov1.Sizing{VCPUs: 1, HostCPUs: 2, CPURequest: resource.MustParse("2"), Memory: resource.MustParse("1Gi")}
		c.Status.Placement = &isov1.PlacementStatus{Node: node}
	}
	return c
}

func flow(c isov1.CrawlerVM) Flow {
	mac, _ := net.ParseMAC(render.MAC(&c))
	return Flow{Key: c.Namespace + "/" + c.Name, MAC: mac, Deadline: c.Spec.RTNIC.Deadline.Duration, MinBandwidth: 10_000_000}
}

func TestDesired(t *testing.T) {
	ms := time.Millisecond
	bridge := nad("bms", "rt-net", `{"cniVersion":"0.3.1","type":"bridge","bridge":"br-rt"}`, nil)
	named := nad("bms", "rt-eth1", `{"cniVersion":"0.3.1","plugins":[{"type":"bridge","bridge":"br-1"}]}`, map[string]string{isov1.AnnotationRTUplink: "eth1"})
	sriov := nad("bms", "rt-vf", `{"type":"sriov"}`, nil)
	a := placed("bms", "a", "n1", "rt-net", 5*ms)
	b := placed("bms", "b", "n1", "rt-net", 10*ms)
	c := placed("bms", "c", "n1", "rt-eth1", 5*ms)
	cases := map[string]struct {
		crawlers []isov1.CrawlerVM
		nads     []nadv1.NetworkAttachmentDefinition
		want     []Uplink
		skipped  []Skipped
	}{
		"nothing on the node": {
			crawlers: []isov1.CrawlerVM{placed("bms", "x", "n2", "rt-net", ms), placed("bms", "y", "", "rt-net", ms), placed("bms", "z", "n1", "", 0)},
			nads:     []nadv1.NetworkAttachmentDefinition{bridge},
		},
		"flows by uplink, sorted by key; the annotation names the interface": {
			crawlers: []isov1.CrawlerVM{b, c, a},
			nads:     []nadv1.NetworkAttachmentDefinition{bridge, named},
			want: []Uplink{
				{Bridge: "br-rt", Networks: []string{"bms/rt-net"}, Flows: []Flow{flow(a), flow(b)}},
				{Interface: "eth1", Bridge: "br-1", Networks: []string{"bms/rt-eth1"}, Flows: []Flow{flow(c)}},
			},
		},
		"a missing network and an SR-IOV one are skipped with the reason": {
			crawlers: []isov1.CrawlerVM{placed("bms", "gone", "n1", "nowhere", ms), placed("bms", "vf", "n1", "rt-vf", ms)},
			nads:     []nadv1.NetworkAttachmentDefinition{sriov},
			skipped: []Skipped{
				{"bms/gone", "NetworkAttachmentDefinition bms/nowhere not found"},
				{"bms/vf", "bms/rt-vf is an SR-IOV network: its VF bypasses the host's traffic control (the guest can mark its traffic where the network opts in with isochron.io/guest-dscp)"},
			},
		},
		"a network deleted under a crawler the host scheduled: it keeps its uplink": {
			crawlers: []isov1.CrawlerVM{func() isov1.CrawlerVM {
				c := placed("bms", "kept", "n1", "deleted", 5*ms)
				c.Status.RTNIC = &isov1.RTNICStatus{Class: "EF", Deadline: metav1.Duration{Duration: 5 * ms}, Uplink: "eth1"}
				return c
			}()},
			want: []Uplink{{Interface: "eth1", Networks: []string{"bms/deleted"}, Flows: []Flow{flow(placed("bms", "kept", "n1", "deleted", 5*ms))}}},
		},
		"a bridge configuration without a bridge is cni0": {
			crawlers: []isov1.CrawlerVM{a},
			nads:     []nadv1.NetworkAttachmentDefinition{nad("bms", "rt-net", `{"type":"bridge"}`, nil)},
			want:     []Uplink{{Bridge: "cni0", Networks: []string{"bms/rt-net"}, Flows: []Flow{flow(a)}}},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, skipped := Desired("n1", tc.crawlers, tc.nads)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("uplinks (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.skipped, skipped); diff != "" {
				t.Errorf("skipped (-want +got):\n%s", diff)
			}
		})
	}
}
