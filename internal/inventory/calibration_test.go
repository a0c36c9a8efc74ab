package inventory

import (
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	isov1 "isochron.io/isochron/api/v1alpha1"
	"isochron.io/isochron/internal/calibration"
)

var at = time.Date(2026, 11, 23, 3, 0, 0, 0, time.UTC)

// sample is a probe Job job of the crawler ns/job that measured ratio times the
// prediction of 4ms.
func sample(ns, job string, ratio float64) calibration.Sample {
	return calibration.Sample{
		Job: job, Crawler: ns + "/" + job, At: at,
		Measured: time.Duration(ratio * float64(4*time.Millisecond)), Predicted: 4 * time.Millisecond,
		Ratio: ratio,
	}
}

func generation(p isov1.ContentionProfile, g int64) *isov1.ContentionProfile {
	p.Generation = g
	return &p
}

// recorded is a NodeCalibration named node with samples recorded with profile p, oldest
// first.
func recorded(node string, p *isov1.ContentionProfile, samples ...calibration.Sample) *isov1.NodeCalibration {
	cal := &isov1.NodeCalibration{ObjectMeta: metav1.ObjectMeta{Name: node}}
	for _, s := range samples {
		Record(cal, p, s)
	}
	return cal
}

func condition(c *metav1.Condition) string {
	if c == nil {
		return "none"
	}
	return fmt.Sprintf("%s %s: %s", c.Status, c.Reason, c.Message)
}

func TestRecordKeepsTheSamplesOfOneModel(t *testing.T) {
	rt := generation(profile("rt", 0, nil), 3)
	cal := recorded("node-1", rt, sample("a", "a1", 2))
	if cal.Status.Correction != "" || cal.Status.Profile != "rt" || cal.Status.ProfileGeneration != 3 || *cal.Status.Namespaces != 1 {
		t.Errorf("after one sample: %+v, want no correction yet, profile rt generation 3, 1 namespace", cal.Status)
	}
	if Record(cal, rt, sample("a", "a1", 9)) {
		t.Error("a probe was sampled twice")
	}
	Record(cal, rt, sample("b", "b1", 2.5))
	Record(cal, rt, sample("a", "a2", 2.5))
	if cal.Status.Correction != "" || *cal.Status.Namespaces != 2 {
		t.Errorf("after samples of two namespaces: %+v, want no correction", cal.Status)
	}
	want := "False TooFewNamespaces: samples from 2 namespaces, 3 needed: the node takes its class's correction, if its profile has one; no namespace moves the shared model alone"
	if got := condition(metav1Find(cal.Status.Conditions)); got != want {
		t.Errorf("condition %s, want %s", got, want)
	}
	Record(cal, rt, sample("c", "c1", 2.2))
	if cal.Status.Correction != "2.2" || *cal.Status.Namespaces != 3 || cal.Status.Samples[0].Job != "c1" {
		t.Errorf("after samples of three namespaces: %+v, want correction 2.2 (a 2.25→2.5 nearer 1: 2; b 2.5; c 2.2), newest first", cal.Status)
	}
	want = "True EnoughNamespaces: the node's own correction is 2.2, from 4 samples of 3 namespaces (the median of each namespace's own median)"
	if got := condition(metav1Find(cal.Status.Conditions)); got != want {
		t.Errorf("condition %s, want %s", got, want)
	}
	if s := cal.Status.Samples[0]; s.Ratio != "2.2" || s.Measured.Duration != 8800*time.Microsecond || s.Predicted.Duration != 4*time.Millisecond || s.Crawler != "c/c1" {
		t.Errorf("sample c1 stored as %+v", s)
	}

	// The profile changes: the old samples measured another model.
	rt4 := generation(profile("rt", 0, nil), 4)
	Record(cal, rt4, sample("d", "d1", 1))
	if cal.Status.ProfileGeneration != 4 || len(cal.Status.Samples) != 1 || cal.Status.Correction != "" || *cal.Status.Namespaces != 1 {
		t.Errorf("after the profile changed: %+v, want only the new sample, no correction", cal.Status)
	}
	for i := range 40 {
		Record(cal, rt4, sample(fmt.Sprintf("ns-%d", i%7), fmt.Sprintf("e%d", i), 1.5))
	}
	if len(cal.Status.Samples) > calibration.MaxSamples || *cal.Status.Namespaces != calibration.MaxNamespaces {
		t.Errorf("kept %d samples of %d namespaces, want at most %d of %d", len(cal.Status.Samples), *cal.Status.Namespaces, calibration.MaxSamples, calibration.MaxNamespaces)
	}
}

func metav1Find(cs []metav1.Condition) *metav1.Condition {
	for i := range cs {
		if cs[i].Type == isov1.ConditionCalibrated {
			return &cs[i]
		}
	}
	return nil
}

func TestCorrection(t *testing.T) {
	rt := generation(profile("rt", 0, nil), 3)
	three := []calibration.Sample{sample("a", "a", 2), sample("b", "b", 2.2), sample("c", "c", 1.9)}
	withClass := func(p *isov1.ContentionProfile, k string, namespaces int32, observed int64) *isov1.ContentionProfile {
		p = p.DeepCopy()
		p.Status = isov1.ContentionProfileStatus{ObservedGeneration: observed, Correction: isov1.Decimal(k), Namespaces: &namespaces, Samples: ptr.To(int32(9))}
		return p
	}
	for name, tc := range map[string]struct {
		profile *isov1.ContentionProfile
		cal     *isov1.NodeCalibration
		want    float64
		source  calibration.Source
		text    string
	}{
		"no calibration": {rt, nil, 1, calibration.SourceNone,
			"none: the node's own: no samples; its class's: no samples"},
		"the node's own": {rt, recorded("n", rt, three...), 2, calibration.SourceNode,
			"the node's own (samples from 3 namespaces)"},
		"the built-in defaults are calibrated too": {nil, recorded("n", nil, three...), 2, calibration.SourceNode,
			"the node's own (samples from 3 namespaces)"},
		"samples of an earlier generation do not count": {generation(profile("rt", 0, nil), 4), recorded("n", rt, three...), 1, calibration.SourceNone,
			"none: the node's own: no samples; its class's: no samples"},
		"samples of another profile do not count": {generation(profile("other", 0, nil), 3), recorded("n", rt, three...), 1, calibration.SourceNone,
			"none: the node's own: no samples; its class's: no samples"},
		"two namespaces: the class's": {withClass(rt, "1.5", 4, 3), recorded("n", rt, three[:2]...), 1.5, calibration.SourceClass,
			"its class's (samples from 4 namespaces); the node's own: samples from 2 namespaces, 3 needed"},
		"a class correction of an earlier generation does not count": {withClass(rt, "1.5", 4, 2), nil, 1, calibration.SourceNone,
			"none: the node's own: no samples; its class's: no samples"},
		"a class correction of too few namespaces (an earlier release's) does not count": {withClass(rt, "1.5", 2, 3), nil, 1, calibration.SourceNone,
			"none: the node's own: no samples; its class's: samples from 2 namespaces, 3 needed"},
		"the node's own before the class's": {withClass(rt, "1.5", 4, 3), recorded("n", rt, three...), 2, calibration.SourceNode,
			"the node's own (samples from 3 namespaces)"},
	} {
		t.Run(name, func(t *testing.T) {
			a := Correction(tc.profile, tc.cal)
			if a.Correction != tc.want || a.Source != tc.source || a.String() != tc.text {
				t.Errorf("Correction = %v (%s) %q, want %v (%s) %q", a.Correction, a.Source, a, tc.want, tc.source, tc.text)
			}
		})
	}
}

func TestClassStatus(t *testing.T) {
	rt := generation(profile("rt", 0, nil), 3)
	other := recorded("other", generation(profile("other", 0, nil), 1), sample("x", "x", 4), sample("y", "y", 4), sample("z", "z", 4))
	for name, tc := range map[string]struct {
		cals []isov1.NodeCalibration
		want isov1.ContentionProfileStatus
	}{
		"no samples": {nil, isov1.ContentionProfileStatus{ObservedGeneration: 3, Samples: ptr.To(int32(0)), Nodes: ptr.To(int32(0)), Namespaces: ptr.To(int32(0)),
			Conditions: []metav1.Condition{{Type: isov1.ConditionCalibrated, Status: metav1.ConditionFalse, Reason: isov1.ReasonTooFewNamespaces, ObservedGeneration: 3,
				Message: "no samples: no class correction; no namespace moves the shared model alone"}}}},
		"one namespace on every node counts once": {
			[]isov1.NodeCalibration{
				*recorded("node-0", rt, sample("a", "a0", 2), sample("a", "a1", 2)),
				*recorded("node-1", rt, sample("a", "a2", 2)),
				*recorded("node-2", rt, sample("a", "a3", 2), sample("b", "b0", 2)),
				*other,
			},
			isov1.ContentionProfileStatus{ObservedGeneration: 3, Samples: ptr.To(int32(5)), Nodes: ptr.To(int32(3)), Namespaces: ptr.To(int32(2)),
				Conditions: []metav1.Condition{{Type: isov1.ConditionCalibrated, Status: metav1.ConditionFalse, Reason: isov1.ReasonTooFewNamespaces, ObservedGeneration: 3,
					Message: "samples from 2 namespaces, 3 needed: no class correction; no namespace moves the shared model alone"}}}},
		"three namespaces across three nodes (a: 2 and 2.2, the nearer 1)": {
			[]isov1.NodeCalibration{
				*recorded("node-0", rt, sample("a", "a0", 2)),
				*recorded("node-1", rt, sample("b", "b0", 2.4)),
				*recorded("node-2", rt, sample("c", "c0", 1.8), sample("a", "a1", 2.2)),
				*other,
			},
			isov1.ContentionProfileStatus{ObservedGeneration: 3, Correction: "2", Samples: ptr.To(int32(4)), Nodes: ptr.To(int32(3)), Namespaces: ptr.To(int32(3)),
				Conditions: []metav1.Condition{{Type: isov1.ConditionCalibrated, Status: metav1.ConditionTrue, Reason: isov1.ReasonEnoughNamespaces, ObservedGeneration: 3,
					Message: "the class correction (probes on 3 of its nodes) is 2, from 4 samples of 3 namespaces (the median of each namespace's own median)"}}}},
		"bounded, and says so": {
			[]isov1.NodeCalibration{*recorded("node-0", rt, sample("a", "a0", 9), sample("b", "b0", 8), sample("c", "c0", 7))},
			isov1.ContentionProfileStatus{ObservedGeneration: 3, Correction: "4", Samples: ptr.To(int32(3)), Nodes: ptr.To(int32(1)), Namespaces: ptr.To(int32(3)),
				Conditions: []metav1.Condition{{Type: isov1.ConditionCalibrated, Status: metav1.ConditionTrue, Reason: isov1.ReasonEnoughNamespaces, ObservedGeneration: 3,
					Message: "the class correction (probes on 1 of its nodes) is 4, from 3 samples of 3 namespaces (the median of each namespace's own median); their median 8 is bounded to [0.5, 4]: the profile itself is wrong for these nodes"}}}},
	} {
		t.Run(name, func(t *testing.T) {
			got := ClassStatus(rt, tc.cals, at)
			if diff := cmp.Diff(tc.want, got, cmpopts.IgnoreFields(metav1.Condition{}, "LastTransitionTime")); diff != "" {
				t.Errorf("ClassStatus (-want +got):\n%s", diff)
			}
		})
	}
}

// The condition's transition time moves only when its status does.
func TestClassStatusKeepsTheTransitionTime(t *testing.T) {
	rt := generation(profile("rt", 0, nil), 3)
	cals := []isov1.NodeCalibration{*recorded("node-0", rt, sample("a", "a0", 2), sample("b", "b0", 2))}
	rt.Status = ClassStatus(rt, cals, at)
	cals = append(cals, *recorded("node-1", rt, sample("b", "b1", 2)))
	rt.Status = ClassStatus(rt, cals, at.Add(time.Hour))
	if c := metav1Find(rt.Status.Conditions); !c.LastTransitionTime.Time.Equal(at) {
		t.Errorf("still too few namespaces, but the transition time moved: %v", c.LastTransitionTime)
	}
	cals = append(cals, *recorded("node-2", rt, sample("c", "c0", 2)))
	rt.Status = ClassStatus(rt, cals, at.Add(2*time.Hour))
	if c := metav1Find(rt.Status.Conditions); c.Status != metav1.ConditionTrue || !c.LastTransitionTime.Time.Equal(at.Add(2*time.Hour)) {
		t.Errorf("calibrated at the third namespace: %s at %v", condition(c), c.LastTransitionTime)
	}
}

// The trust rule through the API's types, played by an attacker: the namespace "liar"
// runs crawlers on every node of the class and reports through them, as often as it
// likes, 1000 or 0.001 times what the model predicts. Neither a node's correction nor
// the class's moves when the other namespaces agree, and neither leaves the range of the
// other namespaces' values when they do not.
func TestOneNamespaceCannotMoveANodeOrItsClass(t *testing.T) {
	rt := generation(profile("rt", 0, nil), 3)
	classes := map[string]struct {
		nodes [][]honest // each node's honest samples, oldest first
		// lo and hi: the range of the honest namespaces' values, the node's and the class's.
		nodeLo, nodeHi, classLo, classHi float64
		// nodeOK: the node's samples are from enough namespaces with the liar's.
		nodeOK bool
	}{
		"three namespaces agree at 2 on each node": {
			nodes:  [][]honest{{{"a", 2}, {"b", 2}, {"c", 2}}, {{"a", 2}, {"b", 2}, {"c", 2}}},
			nodeLo: 2, nodeHi: 2, classLo: 2, classHi: 2, nodeOK: true,
		},
		"two agree at 1 on one node, a third elsewhere": {
			nodes:  [][]honest{{{"a", 1}, {"b", 1}}, {{"c", 1}}},
			nodeLo: 1, nodeHi: 1, classLo: 1, classHi: 1, nodeOK: true,
		},
		"they disagree, 0.8 to 3": {
			nodes:  [][]honest{{{"a", 0.8}, {"b", 3}}, {{"c", 1.5}, {"d", 2}}},
			nodeLo: 0.8, nodeHi: 3, classLo: 0.8, classHi: 3, nodeOK: true,
		},
		"one honest namespace on the node": {
			nodes:   [][]honest{{{"a", 2}}, {{"b", 2}, {"c", 2}}},
			classLo: 2, classHi: 2,
		},
	}
	liars := map[string]struct {
		ratio            float64
		crawlers, probes int
		// between: the honest namespaces probe again after the attack; else the attack's
		// samples are the node's newest.
		between bool
	}{
		"stalls on purpose: 1000x, newest":        {1000, 6, 5, false},
		"stalls on purpose: 1000x, between":       {1000, 6, 5, true},
		"under-reports: 0.001x, newest":           {0.001, 6, 5, false},
		"under-reports: 0.001x, between":          {0.001, 6, 5, true},
		"reports 1 to hide a real excess, newest": {1, 20, 2, false},
		"one probe per node, newest":              {1000, 1, 1, false},
	}
	for cname, class := range classes {
		for lname, liar := range liars {
			t.Run(cname+"/"+lname, func(t *testing.T) {
				var cals []isov1.NodeCalibration
				for i, node := range class.nodes {
					cal := &isov1.NodeCalibration{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("node-%d", i)}}
					for j, h := range node {
						Record(cal, rt, sample(h.ns, fmt.Sprintf("%s-%d-%d", h.ns, i, j), h.ratio))
					}
					for p := range liar.probes {
						for c := range liar.crawlers {
							Record(cal, rt, sample("liar", fmt.Sprintf("c%d-%d-%d", c, i, p), liar.ratio))
						}
					}
					for j, h := range node {
						if liar.between {
							Record(cal, rt, sample(h.ns, fmt.Sprintf("%s-%d-%d-again", h.ns, i, j), h.ratio))
						}
					}
					cals = append(cals, *cal)
				}
				node := Correction(rt, &cals[0])
				if node.Node.OK != class.nodeOK {
					t.Fatalf("node-0: %s, want its own correction %v", node, class.nodeOK)
				}
				if class.nodeOK && (node.Correction < class.nodeLo || node.Correction > class.nodeHi) {
					t.Errorf("node-0's correction %v (%s), outside the honest namespaces' [%v, %v]", node.Correction, node, class.nodeLo, class.nodeHi)
				}
				st := ClassStatus(rt, cals, at)
				k, _ := st.Correction.Float64()
				if st.Correction == "" || k < class.classLo || k > class.classHi {
					t.Errorf("class correction %q (%s), want one in the honest namespaces' [%v, %v]", st.Correction, condition(metav1Find(st.Conditions)), class.classLo, class.classHi)
				}
				if *st.Namespaces != int32(len(namespacesOf(class.nodes))+1) {
					t.Errorf("class rests on %d namespaces, want the honest ones and the liar once", *st.Namespaces)
				}
			})
		}
	}
}

// honest is a sample of an honest namespace: its namespace and ratio.
type honest struct {
	ns    string
	ratio float64
}

func namespacesOf(nodes [][]honest) map[string]bool {
	out := map[string]bool{}
	for _, n := range nodes {
		for _, h := range n {
			out[h.ns] = true
		}
	}
	return out
}
