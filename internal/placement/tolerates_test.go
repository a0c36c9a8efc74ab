package placement

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
)

// Tolerates judges as kube-scheduler does (corev1.Toleration.ToleratesTaint, with the
// comparison operators' feature gate at its default, off), for every kind of toleration.
func TestToleratesAsKubeScheduler(t *testing.T) {
	taints := []corev1.Taint{
		{Key: "rt", Value: "owner-a", Effect: corev1.TaintEffectNoSchedule},
		{Key: "rt", Value: "7", Effect: corev1.TaintEffectNoExecute},
		{Key: "other", Effect: corev1.TaintEffectPreferNoSchedule},
	}
	tolerations := []corev1.Toleration{
		{Operator: corev1.TolerationOpExists},
		{Key: "rt", Operator: corev1.TolerationOpExists},
		{Key: "rt", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute},
		{Key: "rt", Value: "owner-a"},
		{Key: "rt", Operator: corev1.TolerationOpEqual, Value: "owner-b"},
		{Key: "rt", Operator: corev1.TolerationOpEqual, Value: "owner-a", Effect: corev1.TaintEffectNoSchedule},
		{Key: "rt", Operator: corev1.TolerationOpGt, Value: "5"},
		{Key: "rt", Operator: corev1.TolerationOpLt, Value: "9"},
		{Key: "other", Operator: "Unknown"},
	}
	for i := range tolerations {
		for j := range taints {
			tol, taint := &tolerations[i], &taints[j]
			want := tol.ToleratesTaint(klog.Background(), taint, false)
			if got := Tolerates(tol, taint); got != want {
				t.Errorf("toleration %+v, taint %+v: %v, kube-scheduler says %v", *tol, *taint, got, want)
			}
		}
	}
}
