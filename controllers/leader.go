package controllers

import (
	"fmt"
	"os"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection/resourcelock"

	isov1 "isochron.io/isochron/api/v1alpha1"
)

// NewLeaderLock is the manager's leader election lock: the Lease isov1.LeaderLease in
// namespace (empty: the manager's own, in a cluster), held under a new identity, the host
// name and a UUID, as controller-runtime makes its own. The reconciler writes that
// identity with each reservation it changes (WithLeaderIdentity, status.decidedBy), and
// the API server's leader fence (config/admission) admits the change only while the
// Lease names it: a replica that lost the Lease without noticing (a long pause) writes
// no decision.
func NewLeaderLock(cfg *rest.Config, namespace string, renewDeadline time.Duration) (resourcelock.Interface, error) {
	if namespace == "" {
		b, err := os.ReadFile("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
		if err != nil {
			return nil, fmt.Errorf("no --leader-election-namespace, and not in a cluster to take the manager's own: %w", err)
		}
		namespace = strings.TrimSpace(string(b))
	}
	host, err := os.Hostname()
	if err != nil {
		return nil, fmt.Errorf("naming this replica for leader election: %w", err)
	}
	id := host + "_" + string(uuid.NewUUID())
	return resourcelock.NewFromKubeconfig(resourcelock.LeasesResourceLock, namespace, isov1.LeaderLease,
		resourcelock.ResourceLockConfig{Identity: id}, cfg, renewDeadline)
}
