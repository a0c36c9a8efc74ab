package cli

import (
	"bytes"
	"fmt"
	"io"

	"isochron.io/isochron/internal/inventory"
	"isochron.io/isochron/internal/placement"
	"isochron.io/isochron/internal/render"
	"isochron.io/isochron/internal/sizing"
	"isochron.io/isochron/internal/slo"
)

// NotPlacedError means some crawler has no node: the CLI exits 3 with it.
type NotPlacedError struct{ Problems []string }

func (e *NotPlacedError) Error() string {
	var b bytes.Buffer
	for i, p := range e.Problems {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(p)
	}
	return b.String()
}

// Render writes, as multi-document YAML, the objects the operator would create for the
// crawlers in inv. With node set every crawler is rendered on that node; otherwise each
// is placed, in namespace/name order, on the Nodes in inv as the operator would place it.
// Notes for the reader (what was assumed) go to notes. A crawler without a UID (from a
// file, not the cluster) is rendered without an owner reference or inputs hash
// (render.VM): an offline render cannot know them. Each VM is followed by its guest
// Secret (render.GuestSecret), its data as stringData to be read, without the probe key,
// which the operator derives from its master key.
func Render(inv *Inventory, node string, out, notes io.Writer) error {
	if len(inv.CrawlerVMs) == 0 {
		return &InputError{Problems: []string{"no CrawlerVM in the input"}}
	}
	if node == "" && len(inv.Nodes) == 0 {
		return &InputError{Problems: []string{"no node to render on: pass --node NAME, or include Node objects (kubectl get nodes -o yaml) in the input"}}
	}
	var planned []placement.Planned
	if node == "" {
		planned, _ = placement.Plan(inv.PlacementNodes(), inv.Requests())
	}
	var unplaced []string
	var buf bytes.Buffer
	for i, c := range inv.CrawlerVMs {
		var s sizing.Result
		target := node
		if planned != nil {
			d := planned[i]
			if !d.Placed() {
				unplaced = append(unplaced, fmt.Sprintf("CrawlerVM %s: not placed: %s", key(c), d.Reason))
				continue
			}
			target, s = d.Node, d.Sizing
		} else {
			var err error
			if s, err = sizing.Size(inventory.Demand(&c.Spec), inv.paramsOf(node)); err != nil {
				return &InputError{Problems: []string{fmt.Sprintf("CrawlerVM %s: %v", key(c), err)}}
			}
		}
		binding, guestDSCP := render.BindingBridge, false
		if c.Spec.RTNIC != nil {
			if nad := inv.network(render.NetworkKey(c).String()); nad != nil {
				binding, guestDSCP = render.BindingOf(nad), render.GuestDSCPOf(nad)
			} else {
				fmt.Fprintf(notes, "note: CrawlerVM %s: NetworkAttachmentDefinition %s is not in the input; rendering a bridge binding\n", key(c), render.NetworkKey(c))
			}
		}
		// The agent of this release, told the probe gateway by its DNS name: the operator
		// adds the probe Service's cluster IP, which exists only in a cluster.
		agent := &render.Agent{Image: slo.DefaultImage, Gateways: slo.GatewayURLs(c, "")}
		vm, err := render.VM(render.Input{CrawlerVM: c, Sizing: s, Node: target, RTBinding: binding, GuestDSCP: guestDSCP, Agent: agent})
		if err != nil {
			return &InputError{Problems: []string{fmt.Sprintf("CrawlerVM %s: %v", key(c), err)}}
		}
		y, err := render.YAML(vm)
		if err != nil {
			return err
		}
		buf.WriteString("---\n")
		buf.Write(y)
		secret, err := render.GuestSecret(render.Input{CrawlerVM: c, Sizing: s, Node: target, RTBinding: binding, GuestDSCP: guestDSCP, Agent: agent})
		if err != nil || secret == nil {
			return err
		}
		secret.StringData = map[string]string{}
		for k, v := range secret.Data {
			secret.StringData[k] = string(v)
		}
		secret.Data = nil
		if y, err = render.YAML(secret); err != nil {
			return err
		}
		buf.WriteString("---\n")
		buf.Write(y)
	}
	if len(inv.CrawlerVMs) > len(unplaced) {
		fmt.Fprintln(notes, "note: each guest Secret is rendered without the crawler's probe key, which the operator derives from its master key")
	}
	if _, err := out.Write(buf.Bytes()); err != nil {
		return err
	}
	if len(unplaced) > 0 {
		return &NotPlacedError{Problems: unplaced}
	}
	return nil
}
