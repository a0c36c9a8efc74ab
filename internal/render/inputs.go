package render

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"mime"
	"mime/multipart"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/types"
	kubevirtv1 "kubevirt.io/api/core/v1"

	isov1 "isochron.io/isochron/api/v1alpha1"
	"isochron.io/isochron/internal/model"
	"isochron.io/isochron/internal/rtnet"
	"isochron.io/isochron/internal/sizing"
)

// A running VMI is restarted only when what it was rendered from changes: the crawler's
// spec fields the VMI depends on, its size or its RT binding (its node changes by a live
// migration, VMInputsHash). A change of the renderer alone (an isochron upgrade that
// renders differently) takes effect when a VMI is next started, never by restarting a
// running one: a crawler at 99.999% cannot take a restart of every VM in the cluster on
// upgrade. The VMIs KubeVirt starts from a crawler's VM carry the hash of its inputs
// (isov1.AnnotationVMInputs); the bare VMIs of releases before isochron owned VMs carry
// InputsHash (isov1.AnnotationVMIInputs, node included), or no hash at all, and Compare
// judges them when their VM adopts them.

// inputs is what a VMI is rendered from, as hashed.
type inputs struct {
	UID          types.UID           `json:"uid"`
	Namespace    string              `json:"namespace"`
	Name         string              `json:"name"`
	Guest        isov1.Guest         `json:"guest"`
	CPUPlacement isov1.CPUPlacement  `json:"cpuPlacement"`
	RTNIC        *isov1.RTNIC        `json:"rtNIC,omitempty"`
	NodeSelector map[string]string   `json:"nodeSelector,omitempty"`
	Tolerations  []corev1.Toleration `json:"tolerations,omitempty"`
	Sizing       renderedSize        `json:"sizing"`
	Node         string              `json:"node"`
	Binding      Binding             `json:"binding,omitempty"`
}

// renderedSize is the part of a crawler's size its VMI is rendered from, with
// sizing.Result's field names, so that the hash of a VMI rendered before a field was
// added to sizing.Result is unchanged. The VFIO memory is not in it: KubeVirt derives that
// from the SR-IOV interface (the binding).
type renderedSize struct {
	VCPUs           int32
	HostCPUs        int32
	CPURequestMilli int64
	MemoryBytes     int64
	HugepagesBytes  int64
}

func renderedSizeOf(r sizing.Result) renderedSize {
	return renderedSize{VCPUs: r.VCPUs, HostCPUs: r.HostCPUs, CPURequestMilli: r.CPURequestMilli, MemoryBytes: r.MemoryBytes, HugepagesBytes: r.HugepagesBytes}
}

func inputsOf(in Input) inputs {
	cvm := in.CrawlerVM
	x := inputs{
		UID: cvm.UID, Namespace: cvm.Namespace, Name: cvm.Name,
		Guest: cvm.Spec.Guest, CPUPlacement: cvm.Spec.CPUPlacement, RTNIC: cvm.Spec.RTNIC,
		Sizing: renderedSizeOf(in.Sizing), Node: in.Node,
	}
	if x.CPUPlacement == "" {
		x.CPUPlacement = isov1.CPUPlacementDedicated // the schema's default
	}
	if p := cvm.Spec.Placement; p != nil {
		if len(p.NodeSelector) > 0 {
			x.NodeSelector = p.NodeSelector
		}
		if len(p.Tolerations) > 0 {
			x.Tolerations = p.Tolerations
		}
	}
	if x.RTNIC != nil {
		x.Binding = in.RTBinding
		if x.Binding == "" {
			x.Binding = BindingBridge
		}
	}
	return x
}

// InputsHash identifies what a bare VMI of a release before isochron owned VMs was
// rendered from (see inputs, node included), as those releases annotated it
// (isov1.AnnotationVMIInputs): equal inputs, equal hash.
func InputsHash(in Input) string {
	b, err := json.Marshal(inputsOf(in))
	if err != nil {
		panic(err) // plain values: cannot fail
	}
	return hashOf(b)
}

func hashOf(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:8])
}

// Fit is how a bare VMI of an earlier release relates to the inputs it should be
// rendered from now.
type Fit int

const (
	// Current: the VMI was rendered from the current inputs; its VM adopts it running.
	Current Fit = iota
	// Outdated: an input changed (spec, size, node, binding); the VMI is restarted.
	Outdated
	// Adopt: the VMI carries no inputs hash (a release before the hash rendered it) and
	// what it runs matches the current inputs; its VM adopts it running.
	Adopt
)

// Compare tells whether running, a bare VMI an earlier release of isochron created for
// the crawler, still fits in: by the inputs hash it carries, or, for a VMI of a release
// before the hash, by what its spec shows of each input.
func Compare(running *kubevirtv1.VirtualMachineInstance, in Input) Fit {
	if h, ok := running.Annotations[isov1.AnnotationVMIInputs]; ok {
		if h == InputsHash(in) {
			return Current
		}
		return Outdated
	}
	observed, want := observedInputs(running, in.CrawlerVM), inputsOf(in)
	// A MIME part's last line break belongs to the boundary after it: the user's part
	// reads back without it.
	for _, x := range []*inputs{&observed, &want} {
		x.Guest.CloudInitUserData = strings.TrimSuffix(x.Guest.CloudInitUserData, "\n")
	}
	if equality.Semantic.DeepEqual(observed, want) {
		return Adopt
	}
	return Outdated
}

// observedInputs reads back from a VMI's spec the inputs it was rendered from, as far as
// isochron's renderings show them: the identity and placement fields that are not in the
// spec are taken from cvm.
func observedInputs(vmi *kubevirtv1.VirtualMachineInstance, cvm *isov1.CrawlerVM) inputs {
	spec := &vmi.Spec
	x := inputs{UID: cvm.UID, Namespace: cvm.Namespace, Name: cvm.Name, CPUPlacement: isov1.CPUPlacementShared}
	if c := spec.Domain.CPU; c != nil {
		x.Sizing.VCPUs = int32(c.Cores)
		if c.DedicatedCPUPlacement {
			x.CPUPlacement = isov1.CPUPlacementDedicated
		}
	}
	req := spec.Domain.Resources.Requests
	x.Sizing.CPURequestMilli = req.Cpu().MilliValue()
	x.Sizing.MemoryBytes = req.Memory().Value()
	if x.CPUPlacement == isov1.CPUPlacementDedicated {
		x.Sizing.HostCPUs = model.HostCPUs(x.Sizing.VCPUs, false)
		x.Sizing.HugepagesBytes = x.Sizing.MemoryBytes
	}
	if a := spec.Affinity; a != nil && a.NodeAffinity != nil && a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution != nil {
		for _, t := range a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
			for _, e := range t.MatchExpressions {
				if e.Key == corev1.LabelHostname && len(e.Values) == 1 {
					x.Node = e.Values[0]
				}
			}
		}
	}
	if len(spec.NodeSelector) > 0 {
		x.NodeSelector = maps.Clone(spec.NodeSelector)
	}
	if len(spec.Tolerations) > 0 {
		x.Tolerations = slices.Clone(spec.Tolerations)
	}
	// The guest: its disk image and memory as the spec shows them, the user's own
	// cloud-init part as isochron passes it on (alone, or the text/plain part).
	x.Guest.Memory = cvm.Spec.Guest.Memory // rounded to hugepages when rendered: compared through the size
	var data string
	for _, v := range spec.Volumes {
		switch {
		case v.Name == VolumeDisk && v.ContainerDisk != nil:
			x.Guest.Image = v.ContainerDisk.Image
		case v.Name == VolumeCloudInit && v.CloudInitNoCloud != nil:
			data = v.CloudInitNoCloud.UserData
			x.Guest.CloudInitUserData = usersPart(data)
		}
	}
	var mac string
	for _, ifc := range spec.Domain.Devices.Interfaces {
		if ifc.Name == NetworkRT {
			mac = ifc.MacAddress
			x.Binding = BindingBridge
			if ifc.SRIOV != nil {
				x.Binding = BindingSRIOV
			}
		}
	}
	for _, n := range spec.Networks {
		nic := cvm.Spec.RTNIC
		if n.Name == NetworkRT && n.Multus != nil && nic != nil && mac == MAC(cvm) && n.Multus.NetworkName == nic.NetworkName &&
			strings.Contains(data, fmt.Sprintf("# isochron: DSCP %s (%d) on the RT-NIC %s\n", rtnet.ForDeadline(nic.Deadline.Duration, 0).DSCP.Name, rtnet.ForDeadline(nic.Deadline.Duration, 0).DSCP.Value, mac)) {
			// The deadline shows in the VMI only as the DSCP class of isochron's part, and
			// the bandwidth not at all (it counts in placement): with the class and the
			// network as rendered, the RT-NIC is.
			x.RTNIC = nic
		}
	}
	if x.RTNIC == nil && mac != "" {
		x.RTNIC = &isov1.RTNIC{NetworkName: "(another network or MAC)"}
	}
	return x
}

// usersPart is the user's own cloud-init user data within what isochron rendered: the
// text/plain part of isochron's MIME document, none when the data is isochron's part
// alone, else all of it.
func usersPart(data string) string {
	if strings.HasPrefix(data, "Content-Type: multipart/mixed") {
		header, body, _ := strings.Cut(data, "\n\n")
		_, params, err := mime.ParseMediaType(strings.TrimPrefix(strings.SplitN(header, "\n", 2)[0], "Content-Type: "))
		if err != nil {
			return data
		}
		r := multipart.NewReader(strings.NewReader(body), params["boundary"])
		for {
			p, err := r.NextPart()
			if err != nil {
				return ""
			}
			if strings.HasPrefix(p.Header.Get("Content-Type"), "text/plain") {
				b, _ := io.ReadAll(p)
				return string(b)
			}
		}
	}
	if isOurs(data) {
		return ""
	}
	return data
}

// isOurs reports whether a user-data document is one of isochron's parts: each starts
// with an interpreter line and then "# isochron:".
func isOurs(data string) bool {
	_, rest, _ := strings.Cut(data, "\n")
	return strings.HasPrefix(rest, "# isochron:")
}
