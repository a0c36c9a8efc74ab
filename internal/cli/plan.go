package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"isochron.io/isochron/internal/calibration"
	"isochron.io/isochron/internal/model"
	"isochron.io/isochron/internal/placement"
)

// Result is a plan: where each crawler goes and what each node holds afterwards. Its
// JSON form (WriteJSON) is a contract for pipelines; add keys only with a new version.
type Result struct {
	// Crawlers are every CrawlerVM of the input, in namespace/name order.
	Crawlers []CrawlerPlan `json:"crawlers"`
	// Nodes are every Node of the input, by name, including empty ones.
	Nodes []NodePlan `json:"nodes"`
}

// CrawlerPlan is one crawler's outcome.
type CrawlerPlan struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// Placed is false when no node fits; Reason then says why.
	Placed bool `json:"placed"`
	// Node is the chosen node, "" when not placed.
	Node string `json:"node"`
	// VCPUs and HostCPUs are the crawler's size (HostCPUs 0: shared CPUs); for an
	// unplaced crawler, its size on the first node that passed its constraints.
	VCPUs    int32 `json:"vcpus"`
	HostCPUs int32 `json:"hostCPUs"`
	// PredictedErrorMs is the predicted interval error at the crawler's objective, in
	// milliseconds to 3 decimals, with every crawler of the plan in place; 0 when not
	// placed.
	PredictedErrorMs float64 `json:"predictedErrorMs"`
	// ToleranceMs is the crawler's budget, spec.errorBudget.tolerance, in milliseconds.
	ToleranceMs float64 `json:"toleranceMs"`
	// Reason is why nothing fits, "" when placed.
	Reason string `json:"reason"`

	// cause is the dominant term of the prediction, for the table.
	cause string
}

// Key is namespace/name.
func (c CrawlerPlan) Key() string { return c.Namespace + "/" + c.Name }

// NodePlan is one node after the plan.
type NodePlan struct {
	Name string `json:"name"`
	// CPUAllocatable is the node's allocatable CPUs.
	CPUAllocatable float64 `json:"cpuAllocatable"`
	// CPUUsed is what the plan's crawlers take of it: the exclusive host CPUs of dedicated
	// crawlers plus the CPU requests of shared ones.
	CPUUsed float64 `json:"cpuUsed"`
	// Crawlers are the namespace/name of the crawlers placed there, sorted; never null.
	Crawlers []string `json:"crawlers"`
	// WorstPredictedErrorMs is the largest PredictedErrorMs among them, 0 for none.
	WorstPredictedErrorMs float64 `json:"worstPredictedErrorMs"`

	// calibration is the node's correction from probes (its NodeCalibration, or its
	// class's) and what it rests on, for the table; the predictions above include it.
	calibration calibration.Applied
}

// Unplaced returns the crawlers that have no node.
func (r Result) Unplaced() []CrawlerPlan {
	var out []CrawlerPlan
	for _, c := range r.Crawlers {
		if !c.Placed {
			out = append(out, c)
		}
	}
	return out
}

// CheckPlanInput reports input that cannot be planned: no Node, or a CrawlerVM given twice.
func CheckPlanInput(inv *Inventory) error {
	var problems []string
	if len(inv.Nodes) == 0 {
		problems = append(problems, "no Node in the input: include the cluster's Nodes (kubectl get nodes -o yaml > nodes.yaml, then -f nodes.yaml)")
	}
	for i := 1; i < len(inv.CrawlerVMs); i++ { // sorted: duplicates are adjacent
		if k := key(inv.CrawlerVMs[i]); k == key(inv.CrawlerVMs[i-1]) {
			problems = append(problems, fmt.Sprintf("CrawlerVM %s appears more than once in the input", k))
		}
	}
	for i := 1; i < len(inv.Nodes); i++ {
		if n := inv.Nodes[i].Name; n == inv.Nodes[i-1].Name {
			problems = append(problems, fmt.Sprintf("Node %s appears more than once in the input", n))
		}
	}
	if len(problems) > 0 {
		return &InputError{Problems: problems}
	}
	return nil
}

// Plan places every CrawlerVM of inv on its Nodes with the core's planner
// (placement.PlanOn): in namespace/name order, as the operator would on a fresh cluster
// (or beside inv.Residents, which keep their nodes), every figure the one the crawler
// would see with the whole plan applied. Check the input with CheckPlanInput first.
func Plan(inv *Inventory) Result {
	corrections := inv.Corrections()
	planned, nodes := placement.PlanOn(inv.PlacementNodes(), inv.residents(), inv.Requests())
	res := Result{Crawlers: make([]CrawlerPlan, len(planned)), Nodes: make([]NodePlan, len(nodes))}
	for i, p := range planned {
		c := inv.CrawlerVMs[i]
		cp := CrawlerPlan{
			Namespace:   c.Namespace,
			Name:        c.Name,
			Placed:      p.Placed(),
			Node:        p.Node,
			VCPUs:       p.Sizing.VCPUs,
			HostCPUs:    p.Sizing.HostCPUs,
			ToleranceMs: ms(c.Spec.ErrorBudget.Tolerance.Duration),
			Reason:      p.Reason,
		}
		if p.Placed() {
			cp.PredictedErrorMs, cp.cause = ms(p.Final.Error), p.Final.Cause
		}
		res.Crawlers[i] = cp
	}
	for i, n := range nodes {
		worst := 0.0
		if len(n.Crawlers) > 0 {
			worst = ms(n.WorstPredicted)
		}
		res.Nodes[i] = NodePlan{
			Name:                  n.Node,
			CPUAllocatable:        round3(float64(n.AllocatableMilli) / 1000),
			CPUUsed:               round3(float64(n.UsedMilli) / 1000),
			Crawlers:              n.Crawlers,
			WorstPredictedErrorMs: worst,
			calibration:           corrections[n.Node],
		}
	}
	return res
}

func ms(d time.Duration) float64 {
	// To the microsecond as a Duration first, as status records it: rounding the float
	// would take 4.0005 ms (4,000,500 ns, not exact in binary) down where status goes up.
	return float64(d.Round(time.Microsecond)/time.Microsecond) / 1000
}

func round3(x float64) float64 { return math.Round(x*1000) / 1000 }

// WriteJSON writes r as indented JSON, the pipeline contract.
func WriteJSON(w io.Writer, r Result) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// WriteTable writes r for people: the crawlers, the nodes, and in full the reason each
// unplaced crawler has no node.
func WriteTable(w io.Writer, r Result) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "CRAWLER\tNODE\tVCPUS\tHOST CPUS\tPREDICTED\tTOLERANCE\tDOMINANT TERM")
	for _, c := range r.Crawlers {
		node, predicted, cause := c.Node, msText(c.PredictedErrorMs), c.cause
		if !c.Placed {
			node, predicted, cause = "-", "-", "not placed (see below)"
		}
		host := strconv.Itoa(int(c.HostCPUs))
		if c.HostCPUs == 0 {
			host = "shared"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%s\n", c.Key(), node, c.VCPUs, host, predicted, msText(c.ToleranceMs), cause)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	// A CORRECTION column when the input has probes' samples for a node (its
	// NodeCalibration, or its class's in its profile's status).
	calibrated := false
	for _, n := range r.Nodes {
		calibrated = calibrated || n.calibration.Node.Samples > 0 || n.calibration.Class.Samples > 0 || n.calibration.Class.OK
	}
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	header := "NODE\tCPU USED\tCRAWLERS\tWORST PREDICTED"
	if calibrated {
		header += "\tCORRECTION"
	}
	fmt.Fprintln(tw, header)
	for _, n := range r.Nodes {
		worst := "-"
		if len(n.Crawlers) > 0 {
			worst = msText(n.WorstPredictedErrorMs)
		}
		fmt.Fprintf(tw, "%s\t%s/%s CPUs\t%d\t%s", n.Name, num(n.CPUUsed), num(n.CPUAllocatable), len(n.Crawlers), worst)
		if calibrated {
			fmt.Fprintf(tw, "\t%s", correctionText(n.calibration))
		}
		fmt.Fprintln(tw)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	unplaced := r.Unplaced()
	placed := len(r.Crawlers) - len(unplaced)
	fmt.Fprintf(w, "\n%d of %d crawlers placed", placed, len(r.Crawlers))
	if len(unplaced) == 0 {
		_, err := fmt.Fprintln(w, ".")
		return err
	}
	fmt.Fprintln(w, "; not placed:")
	for _, c := range unplaced {
		fmt.Fprintf(w, "  %s: %s\n", c.Key(), c.Reason)
	}
	return nil
}

// correctionText is a node's correction for the table, and what it rests on or why
// there is none: "x3 (samples from 3 namespaces)", "none (samples from 2 namespaces, 3
// needed)", "-" for no samples at all.
func correctionText(a calibration.Applied) string {
	switch a.Source {
	case calibration.SourceNode:
		return fmt.Sprintf("x%s (%s)", num(a.Correction), a.Node.Why())
	case calibration.SourceClass:
		return fmt.Sprintf("x%s (its class's; its own: %s)", num(a.Correction), a.Node.Why())
	}
	if a.Node.Samples == 0 {
		return "-"
	}
	return "none (" + a.Node.Why() + ")"
}

func num(x float64) string { return strconv.FormatFloat(x, 'f', -1, 64) }

func msText(x float64) string {
	if x >= ms(model.Unbounded) {
		return "unbounded"
	}
	return num(x) + "ms"
}

// WritePlan checks inv, plans it and writes the plan as format ("table" or "json"). It
// returns a *NotPlacedError naming the crawlers that have no node (their reasons are in
// the output).
func WritePlan(inv *Inventory, format string, w io.Writer) error {
	if err := CheckPlanInput(inv); err != nil {
		return err
	}
	r := Plan(inv)
	var err error
	switch format {
	case "json":
		err = WriteJSON(w, r)
	case "table":
		err = WriteTable(w, r)
	default:
		return &InputError{Problems: []string{fmt.Sprintf("-o %s: the output format is table or json", format)}}
	}
	if err != nil {
		return err
	}
	if unplaced := r.Unplaced(); len(unplaced) > 0 {
		keys := make([]string, len(unplaced))
		for i, c := range unplaced {
			keys[i] = c.Key()
		}
		return &NotPlacedError{Problems: []string{fmt.Sprintf("%d of %d crawlers not placed (reasons in the plan): %s",
			len(unplaced), len(r.Crawlers), strings.Join(keys, ", "))}}
	}
	return nil
}
