package testcases

import (
	"fmt"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	kubevirtv1 "kubevirt.io/api/core/v1"

	isov1 "isochron.io/isochron/api/v1alpha1"
)

// BareVMI is vmi, the VMI KubeVirt starts from the VM this release renders for cvm, as
// the releases before isochron owned VMs created it themselves: controlled by the
// crawler, annotated with the inputs hash of those releases (hash, render.InputsHash),
// and without an eviction strategy. Upgrade tests start from it.
func BareVMI(vmi *kubevirtv1.VirtualMachineInstance, cvm *isov1.CrawlerVM, hash string) *kubevirtv1.VirtualMachineInstance {
	v := vmi.DeepCopy()
	v.Annotations = map[string]string{isov1.AnnotationVMIInputs: hash}
	v.OwnerReferences = []metav1.OwnerReference{{
		APIVersion: isov1.GroupVersion.String(), Kind: "CrawlerVM", Name: cvm.Name, UID: cvm.UID,
		Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true),
	}}
	v.Spec.EvictionStrategy = nil
	return v
}

// The names v0.1.0 gave a VMI's volumes.
const (
	v010CloudInit = "cloudinitdisk"
	// isochron-agent is a later release's, which v0.1.0 did not have.
	agentVolume = "isochron-agent"
)

// RenderedByV010 is vmi, a bare VMI of this release's inputs (BareVMI), as isochron
// v0.1.0 rendered the same inputs: no inputs hash but its rendered-spec hash, no probe agent, and its
// cloud-init part a shell script that marks the RT-NIC (mac) with the deadline's DSCP
// class (v0.1.0's internal/render/cloudinit.go, word for word). Upgrade tests start from
// it. (The RT-NIC's MAC and class come from the caller, so that package render's own
// tests can use this fixture.)
func RenderedByV010(vmi *kubevirtv1.VirtualMachineInstance, cvm *isov1.CrawlerVM, mac, dscpName string, dscpValue int) *kubevirtv1.VirtualMachineInstance {
	v := vmi.DeepCopy()
	v.Annotations = map[string]string{"isochron.io/vmi-spec-hash": "e93fe49247b9062c"}
	var volumes []kubevirtv1.Volume
	for _, vol := range v.Spec.Volumes {
		if vol.Name != agentVolume && vol.Name != v010CloudInit {
			volumes = append(volumes, vol)
		}
	}
	var disks []kubevirtv1.Disk
	for _, d := range v.Spec.Domain.Devices.Disks {
		if d.Name != agentVolume && d.Name != v010CloudInit {
			disks = append(disks, d)
		}
	}
	var ours string
	if cvm.Spec.RTNIC != nil {
		ours = v010DSCPScript(mac, dscpName, dscpValue)
	}
	if data := v010UserData(cvm.Spec.Guest.CloudInitUserData, ours); data != "" {
		disks = append(disks, kubevirtv1.Disk{
			Name:       v010CloudInit,
			DiskDevice: kubevirtv1.DiskDevice{Disk: &kubevirtv1.DiskTarget{Bus: kubevirtv1.DiskBusVirtio}},
		})
		volumes = append(volumes, kubevirtv1.Volume{
			Name:         v010CloudInit,
			VolumeSource: kubevirtv1.VolumeSource{CloudInitNoCloud: &kubevirtv1.CloudInitNoCloudSource{UserData: data}},
		})
	}
	v.Spec.Volumes, v.Spec.Domain.Devices.Disks = volumes, disks
	return v
}

func v010DSCPScript(mac, className string, classValue int) string {
	return fmt.Sprintf(`#!/bin/sh
# isochron: DSCP %[2]s (%[3]d) on the RT-NIC %[1]s
d=$(ip -o link | awk -v m=%[1]s 'index(tolower($0),m){sub(":","",$2);sub("@.*","",$2);print $2;exit}')
[ -n "$d" ] || { echo "isochron: no NIC with MAC %[1]s" >&2; exit 1; }
if command -v nft >/dev/null; then nft -f - <<EOF
table inet isochron { chain post { type filter hook postrouting priority -150; oifname "$d" ip dscp set %[3]d; oifname "$d" ip6 dscp set %[3]d; } }
EOF
else
iptables -t mangle -A POSTROUTING -o "$d" -j DSCP --set-dscp %[3]d
ip6tables -t mangle -A POSTROUTING -o "$d" -j DSCP --set-dscp %[3]d || true
fi
`, mac, className, classValue)
}

func v010UserData(user, ours string) string {
	const boundary = "==isochron-5f1d=="
	switch {
	case ours == "":
		return user
	case user == "":
		return ours
	}
	var b strings.Builder
	fmt.Fprintf(&b, "Content-Type: multipart/mixed; boundary=\"%s\"\nMIME-Version: 1.0\n\n", boundary)
	for _, p := range []struct{ ctype, body string }{{"text/plain", user}, {"text/x-shellscript", ours}} {
		fmt.Fprintf(&b, "--%s\nContent-Type: %s; charset=\"utf-8\"\nMIME-Version: 1.0\n\n%s", boundary, p.ctype, p.body)
		if !strings.HasSuffix(p.body, "\n") {
			b.WriteString("\n")
		}
	}
	fmt.Fprintf(&b, "--%s--\n", boundary)
	return b.String()
}
