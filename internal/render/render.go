// Package render turns a CrawlerVM and the decisions made for it (size, node, RT-NIC
// binding) into the KubeVirt VirtualMachineInstance that runs it. It is pure: the same
// input gives the same object, byte for byte once serialised.
package render

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	kubevirtv1 "kubevirt.io/api/core/v1"

	isov1 "isochron.io/isochron/api/v1alpha1"
	"isochron.io/isochron/internal/rtnet"
	"isochron.io/isochron/internal/sizing"
)

// Names of the VMI's disks, volumes, interfaces and networks.
const (
	NetworkPod      = "default"
	NetworkRT       = "rt"
	VolumeDisk      = "containerdisk"
	VolumeCloudInit = "cloudinitdisk"
	// VolumeAgent is the probe agent's disk, also its serial: the guest finds it as
	// /dev/disk/by-id/virtio-isochron-agent.
	VolumeAgent = "isochron-agent"
	// AgentDiskPath is the agent's disk in the rtprobe image: the static rtprobe binary,
	// padded to whole sectors.
	AgentDiskPath = "/disk/agent.img"
)

// Binding is how the RT-NIC attaches to the VM.
type Binding string

const (
	// BindingBridge connects the RT-NIC through a Linux bridge (vhost-net in the kernel).
	BindingBridge Binding = "bridge"
	// BindingSRIOV passes an SR-IOV virtual function through to the guest.
	BindingSRIOV Binding = "sriov"
)

// Input is everything the VMI depends on.
type Input struct {
	CrawlerVM *isov1.CrawlerVM
	Sizing    sizing.Result
	// Node is the node the crawler was placed on; required.
	Node string
	// RTBinding is how the RT-NIC attaches; ignored without spec.rtNIC, bridge if empty.
	RTBinding Binding
	// GuestDSCP has the guest mark the RT-NIC's traffic with its class (the network's
	// AnnotationGuestDSCP, GuestDSCPOf); otherwise the host does.
	GuestDSCP bool
	// Agent is isochron's probe agent in the guest; none if nil.
	Agent *Agent
	// RunStrategy is the VM's run strategy; RunStrategyAlways if empty. The operator
	// passes the VM's own once it exists, so that a person's `virtctl stop` (Halted)
	// holds.
	RunStrategy kubevirtv1.VirtualMachineRunStrategy
}

// Agent is what the VMI needs to run isochron's probe agent (rtprobe agent,
// docs/probes.md): the image whose /disk/agent.img is the agent, where the probe gateway
// is, and the crawler's probe key. None counts among the VMI's inputs (InputsHash): the
// gateway and the key are in the guest Secret (GuestSecret), which KubeVirt reads when it
// starts a VMI, so that a recreated probe Service reaches the next VMI without a change
// to the VM's template; a new release's image reaches it when its template is next
// written.
type Agent struct {
	// Image is the rtprobe image of this release.
	Image string
	// Gateways are the probe gateway's base URLs, tried in order.
	Gateways []string
	// Key is the crawler's probe key (credential.Key); nil renders no key (an offline
	// render, which cannot know it).
	Key []byte
	// PullSecret is the Secret in the crawler's namespace that KubeVirt pulls Image with
	// (slo.Options.PullSecret); "" for none.
	PullSecret string
}

// The keys of the guest Secret (GuestSecret).
const (
	// SecretKeyUserData is the cloud-init user data, the key KubeVirt reads a NoCloud
	// secretRef's user data from.
	SecretKeyUserData = "userdata"
	// SecretKeyProbeKey is the crawler's probe key, hex, which the probe pod reads.
	SecretKeyProbeKey = "probe-key"
)

// GuestSecretName is the name of a crawler's guest Secret.
func GuestSecretName(cvm *isov1.CrawlerVM) string { return cvm.Name + "-guest" }

// Name is the deterministic name of a crawler's VM and of its VMIs.
func Name(cvm *isov1.CrawlerVM) string { return cvm.Name }

// VMI renders the VirtualMachineInstance that runs the crawler, as KubeVirt creates it
// from the template of the crawler's VM (VM; KubeVirt adds its owner reference to the
// VM): labelled for the crawler and, when the crawler has a UID, annotated with the hash
// of its inputs (VMInputsHash).
func VMI(in Input) (*kubevirtv1.VirtualMachineInstance, error) {
	cvm := in.CrawlerVM
	if in.Node == "" {
		return nil, fmt.Errorf("rendering %s/%s: no node chosen", cvm.Namespace, cvm.Name)
	}
	spec := kubevirtv1.VirtualMachineInstanceSpec{
		Domain: kubevirtv1.DomainSpec{
			CPU:       cpu(in.Sizing),
			Resources: resources(in.Sizing),
			Devices: kubevirtv1.Devices{
				Disks: []kubevirtv1.Disk{{
					Name:       VolumeDisk,
					DiskDevice: kubevirtv1.DiskDevice{Disk: &kubevirtv1.DiskTarget{Bus: kubevirtv1.DiskBusVirtio}},
				}},
				Interfaces: []kubevirtv1.Interface{{
					Name:                   NetworkPod,
					InterfaceBindingMethod: kubevirtv1.InterfaceBindingMethod{Masquerade: &kubevirtv1.InterfaceMasquerade{}},
				}},
			},
		},
		Networks: []kubevirtv1.Network{{
			Name:          NetworkPod,
			NetworkSource: kubevirtv1.NetworkSource{Pod: &kubevirtv1.PodNetwork{}},
		}},
		Volumes: []kubevirtv1.Volume{{
			Name:         VolumeDisk,
			VolumeSource: kubevirtv1.VolumeSource{ContainerDisk: &kubevirtv1.ContainerDiskSource{Image: cvm.Spec.Guest.Image}},
		}},
		Affinity: Affinity(in.Node),
		// A drain (any eviction of the launcher pod) is refused and marks the VMI for
		// evacuation (status.evacuationNodeName), which isochron carries out by moving the
		// crawler to a node it chooses; KubeVirt migrates nothing itself.
		EvictionStrategy: ptr.To(kubevirtv1.EvictionStrategyExternal),
		// Above every ordinary pod, so that none preempts the launcher of a crawler whose
		// node isochron reserved; the class never preempts (config/scheduling).
		PriorityClassName: isov1.PriorityClassRealtime,
	}
	if in.Sizing.Dedicated() {
		spec.Domain.Memory = &kubevirtv1.Memory{Hugepages: &kubevirtv1.Hugepages{PageSize: "2Mi"}}
	}
	if p := cvm.Spec.Placement; p != nil {
		if len(p.NodeSelector) > 0 {
			spec.NodeSelector = make(map[string]string, len(p.NodeSelector))
			for k, v := range p.NodeSelector {
				spec.NodeSelector[k] = v
			}
		}
		spec.Tolerations = append([]corev1.Toleration(nil), p.Tolerations...)
	}

	if nic := cvm.Spec.RTNIC; nic != nil {
		iface := kubevirtv1.Interface{Name: NetworkRT, MacAddress: MAC(cvm)}
		if in.RTBinding == BindingSRIOV {
			iface.SRIOV = &kubevirtv1.InterfaceSRIOV{}
		} else {
			iface.Bridge = &kubevirtv1.InterfaceBridge{}
		}
		spec.Domain.Devices.Interfaces = append(spec.Domain.Devices.Interfaces, iface)
		spec.Networks = append(spec.Networks, kubevirtv1.Network{
			Name:          NetworkRT,
			NetworkSource: kubevirtv1.NetworkSource{Multus: &kubevirtv1.MultusNetwork{NetworkName: nic.NetworkName}},
		})
	}
	if a := in.Agent; a != nil {
		// Not read-only, though the guest only reads it: KubeVirt copies a containerDisk
		// to the migration target (its overlay is local to the launcher), and libvirt
		// refuses to copy a read-only disk ("Cannot migrate empty or read-only disk"), so a
		// read-only agent disk made every live migration fail (KubeVirt v1.8
		// live-migration-source.go getDiskTargetsForMigration; seen on the local cluster's
		// node VMs). Writes would go to the launcher's overlay, never to the image.
		spec.Domain.Devices.Disks = append(spec.Domain.Devices.Disks, kubevirtv1.Disk{
			Name:       VolumeAgent,
			Serial:     VolumeAgent,
			DiskDevice: kubevirtv1.DiskDevice{Disk: &kubevirtv1.DiskTarget{Bus: kubevirtv1.DiskBusVirtio}},
		})
		spec.Volumes = append(spec.Volumes, kubevirtv1.Volume{
			Name:         VolumeAgent,
			VolumeSource: kubevirtv1.VolumeSource{ContainerDisk: &kubevirtv1.ContainerDiskSource{Image: a.Image, Path: AgentDiskPath, ImagePullSecret: a.PullSecret}},
		})
	}
	data, err := guestUserData(in)
	if err != nil {
		return nil, err
	}
	if data != "" {
		// The user data is in the guest Secret, which KubeVirt reads when it starts the VMI
		// (it would refuse more than 2048 bytes inline): the VMI names it only.
		spec.Domain.Devices.Disks = append(spec.Domain.Devices.Disks, kubevirtv1.Disk{
			Name:       VolumeCloudInit,
			DiskDevice: kubevirtv1.DiskDevice{Disk: &kubevirtv1.DiskTarget{Bus: kubevirtv1.DiskBusVirtio}},
		})
		spec.Volumes = append(spec.Volumes, kubevirtv1.Volume{
			Name: VolumeCloudInit,
			VolumeSource: kubevirtv1.VolumeSource{CloudInitNoCloud: &kubevirtv1.CloudInitNoCloudSource{
				UserDataSecretRef: &corev1.LocalObjectReference{Name: GuestSecretName(cvm)},
			}},
		})
	}

	meta := metav1.ObjectMeta{Name: Name(cvm), Namespace: cvm.Namespace, Labels: labels(cvm)}
	// The owner reference (VM) and the inputs hash name the crawler by its UID, which the
	// API server assigns. A CrawlerVM without one (read from a file by isochronctl render)
	// renders without both: the API server refuses an owner reference without a uid, and
	// a hash of an empty uid is not the one the operator computes for the crawler.
	if cvm.UID != "" {
		meta.Annotations = map[string]string{
			isov1.AnnotationVMInputs:     VMInputsHash(in),
			isov1.AnnotationUserDataHash: UserDataHash(cvm),
		}
	}
	return &kubevirtv1.VirtualMachineInstance{
		TypeMeta:   metav1.TypeMeta{APIVersion: kubevirtv1.GroupVersion.String(), Kind: "VirtualMachineInstance"},
		ObjectMeta: meta,
		Spec:       spec,
	}, nil
}

// guestUserData is the user data the guest gets: the user's own with isochron's agent
// part, "" for neither.
func guestUserData(in Input) (string, error) {
	var ours string
	if a := in.Agent; a != nil {
		var mark *marking
		if nic := in.CrawlerVM.Spec.RTNIC; nic != nil && in.GuestDSCP {
			mark = &marking{mac: MAC(in.CrawlerVM), class: rtnet.ForDeadline(nic.Deadline.Duration, 0).DSCP}
		}
		key := ""
		if a.Key != nil {
			key = hex.EncodeToString(a.Key)
		}
		ours = agentScript(a.Gateways, mark, key)
	}
	return userData(in.CrawlerVM.Spec.Guest.CloudInitUserData, ours)
}

// GuestSecret renders the crawler's guest Secret, which its VMI names: the cloud-init
// user data (SecretKeyUserData: the user's own and isochron's agent part, with the
// gateway's addresses and the crawler's probe key) and the probe key alone
// (SecretKeyProbeKey), which the crawler's probe pods read. Owned by the crawler when it
// has a UID, like its VM. nil when the guest gets no user data.
func GuestSecret(in Input) (*corev1.Secret, error) {
	cvm := in.CrawlerVM
	data, err := guestUserData(in)
	if err != nil || data == "" {
		return nil, err
	}
	s := &corev1.Secret{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
		ObjectMeta: metav1.ObjectMeta{Name: GuestSecretName(cvm), Namespace: cvm.Namespace, Labels: labels(cvm)},
		Type:       corev1.SecretTypeOpaque,
		Data:       map[string][]byte{SecretKeyUserData: []byte(data)},
	}
	if a := in.Agent; a != nil && a.Key != nil {
		s.Data[SecretKeyProbeKey] = []byte(hex.EncodeToString(a.Key))
	}
	if cvm.UID != "" {
		s.OwnerReferences = []metav1.OwnerReference{OwnerReference(cvm)}
	}
	return s, nil
}

// UserDataHash identifies spec.guest.cloudInitUserData as a VM's template was rendered
// with it (isov1.AnnotationUserDataHash): the user data reaches the guest from the guest
// Secret, which KubeVirt reads only when it starts a VMI, so a VMI whose hash differs from
// its template's is restarted to apply it.
func UserDataHash(cvm *isov1.CrawlerVM) string {
	return hashOf([]byte(cvm.Spec.Guest.CloudInitUserData))
}

// OwnerReference makes cvm the controlling owner of an object, so that deleting the
// CrawlerVM deletes it.
func OwnerReference(cvm *isov1.CrawlerVM) metav1.OwnerReference {
	return metav1.OwnerReference{
		APIVersion:         isov1.GroupVersion.String(),
		Kind:               "CrawlerVM",
		Name:               cvm.Name,
		UID:                cvm.UID,
		Controller:         ptr.To(true),
		BlockOwnerDeletion: ptr.To(true),
	}
}

// MAC is the RT-NIC's deterministic, locally administered unicast MAC address, by which
// the guest finds the interface to mark.
func MAC(cvm *isov1.CrawlerVM) string {
	sum := sha256.Sum256([]byte(cvm.Namespace + "/" + cvm.Name))
	sum[0] = 0x02 // locally administered, unicast
	parts := make([]string, 6)
	parts[0] = "02"
	for i := 1; i < 6; i++ {
		parts[i] = hex.EncodeToString(sum[i : i+1])
	}
	return strings.Join(parts, ":")
}

func cpu(s sizing.Result) *kubevirtv1.CPU {
	c := &kubevirtv1.CPU{Cores: uint32(s.VCPUs), Sockets: 1, Threads: 1}
	if s.Dedicated() {
		c.DedicatedCPUPlacement = true
		c.IsolateEmulatorThread = true
		c.Realtime = &kubevirtv1.Realtime{}
		c.NUMA = &kubevirtv1.NUMA{GuestMappingPassthrough: &kubevirtv1.NUMAGuestMappingPassthrough{}}
	}
	return c
}

func resources(s sizing.Result) kubevirtv1.ResourceRequirements {
	cpu := *resource.NewMilliQuantity(s.CPURequestMilli, resource.DecimalSI)
	mem := *resource.NewQuantity(s.MemoryBytes, resource.BinarySI)
	r := kubevirtv1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: cpu, corev1.ResourceMemory: mem},
	}
	if s.Dedicated() {
		// Guaranteed QoS with integer CPUs: the CPU Manager hands out exclusive CPUs.
		r.Limits = corev1.ResourceList{corev1.ResourceCPU: cpu, corev1.ResourceMemory: mem}
	}
	// Shared crawlers get no CPU limit: CFS quota throttling would add up to a period of
	// delay; the request (a cgroup weight) is what protects them.
	return r
}
