package cli

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	isov1 "isochron.io/isochron/api/v1alpha1"
)

func TestLive(t *testing.T) {
	meta := func(ns, name string) metav1.ObjectMeta { return metav1.ObjectMeta{Namespace: ns, Name: name} }
	placedOn := func(name, node string) isov1.CrawlerVM {
		c := *statusCrawler()
		c.Name, c.Status.Placement.Node = name, node
		return c
	}
	pending := isov1.CrawlerVM{ObjectMeta: meta("bms", "pending")}
	cluster := Cluster{
		Nodes:      []corev1.Node{{ObjectMeta: meta("", "rt-2")}, {ObjectMeta: meta("", "rt-1")}},
		CrawlerVMs: []isov1.CrawlerVM{placedOn("kept", "rt-1"), placedOn("changed", "rt-2"), pending},
		Networks:   []nadv1.NetworkAttachmentDefinition{{ObjectMeta: meta("bms", "rt-net")}, {ObjectMeta: meta("bms", "other")}},
	}
	file := func(names ...string) *Inventory {
		inv := &Inventory{}
		for _, n := range names {
			inv.CrawlerVMs = append(inv.CrawlerVMs, &isov1.CrawlerVM{ObjectMeta: meta("bms", n)})
		}
		return inv
	}
	type got struct{ Crawlers, Residents, Nodes, Networks []string }
	tests := map[string]struct {
		files   *Inventory
		cluster Cluster
		want    got
		invalid bool
	}{
		"the cluster's placed crawlers are residents; changed ones and pending ones are not": {
			files: func() *Inventory {
				inv := file("new", "changed")
				inv.Networks = []*nadv1.NetworkAttachmentDefinition{{ObjectMeta: meta("bms", "rt-net")}}
				return inv
			}(),
			cluster: cluster,
			want:    got{Crawlers: []string{"bms/new", "bms/changed"}, Residents: []string{"bms/kept"}, Nodes: []string{"rt-1", "rt-2"}, Networks: []string{"bms/rt-net", "bms/other"}},
		},
		"nodes in the files: refused": {
			files:   func() *Inventory { inv := file("new"); inv.Nodes = []*corev1.Node{{}}; return inv }(),
			cluster: cluster, invalid: true,
		},
		"no crawler in the files: refused": {files: file(), cluster: cluster, invalid: true},
		"a cluster without nodes: refused": {files: file("new"), invalid: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			inv, err := Live(tc.files, tc.cluster)
			var invalid *InputError
			if tc.invalid {
				if !errors.As(err, &invalid) {
					t.Fatalf("err = %v, want an InputError", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var g got
			for _, c := range inv.CrawlerVMs {
				g.Crawlers = append(g.Crawlers, key(c))
			}
			for _, c := range inv.Residents {
				g.Residents = append(g.Residents, key(c))
			}
			for _, n := range inv.Nodes {
				g.Nodes = append(g.Nodes, n.Name)
			}
			for _, n := range inv.Networks {
				g.Networks = append(g.Networks, n.Namespace+"/"+n.Name)
			}
			if diff := cmp.Diff(tc.want, g); diff != "" {
				t.Errorf("Live (-want +got):\n%s", diff)
			}
		})
	}
}
