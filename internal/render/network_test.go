package render

import (
	"strings"
	"testing"

	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	isov1 "isochron.io/isochron/api/v1alpha1"
)

func TestUplinkAllowed(t *testing.T) {
	nad := func(annotations map[string]string) *nadv1.NetworkAttachmentDefinition {
		return &nadv1.NetworkAttachmentDefinition{ObjectMeta: metav1.ObjectMeta{Namespace: "bms", Name: "rt-net", Annotations: annotations}}
	}
	for name, tc := range map[string]struct {
		nad     *nadv1.NetworkAttachmentDefinition
		uplinks []string
		err     string
	}{
		"no annotation: the agent judges the bridge's port": {nad: nad(nil)},
		"a named uplink":       {nad: nad(map[string]string{isov1.AnnotationRTUplink: "eth1"}), uplinks: []string{"eth1", "eth2"}},
		"the primary NIC":      {nad: nad(map[string]string{isov1.AnnotationRTUplink: "eth0"}), uplinks: []string{"eth1"}, err: `annotation isochron.io/rt-uplink names host interface "eth0", which is not one of the RT uplinks the cluster administrator named (eth1)`},
		"none named":           {nad: nad(map[string]string{isov1.AnnotationRTUplink: "eth1"}), err: "named (none)"},
		"the empty annotation": {nad: nad(map[string]string{isov1.AnnotationRTUplink: ""}), uplinks: []string{"eth1"}, err: `host interface ""`},
	} {
		t.Run(name, func(t *testing.T) {
			err := UplinkAllowed(tc.nad, tc.uplinks)
			if (err == nil) != (tc.err == "") || (err != nil && (!strings.Contains(err.Error(), tc.err) || !strings.Contains(err.Error(), "rtUplinks in the ConfigMap isochron-networks"))) {
				t.Errorf("UplinkAllowed = %v, want an error containing %q", err, tc.err)
			}
		})
	}
}
