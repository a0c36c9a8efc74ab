package controllers

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	isov1 "isochron.io/isochron/api/v1alpha1"
	"isochron.io/isochron/internal/access"
)

// LoadNodeAccess reads the administrator's rules of reach (internal/access) from the
// ConfigMap isov1.NodeAccessConfigMap in the manager's namespace. Without the ConfigMap no
// namespace may tolerate a taint (found says so, for the log); one that does not parse
// is an error naming its key. c needs get on that one ConfigMap: the manager's Role in its
// own namespace.
func LoadNodeAccess(ctx context.Context, c client.Client, namespace string) (rules access.Rules, found bool, err error) {
	cm := &corev1.ConfigMap{}
	err = c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: isov1.NodeAccessConfigMap}, cm)
	if apierrors.IsNotFound(err) {
		return access.Rules{}, false, nil
	}
	if err != nil {
		return access.Rules{}, false, fmt.Errorf("reading ConfigMap %s/%s: %w", namespace, isov1.NodeAccessConfigMap, err)
	}
	rules, err = access.Parse(cm.Data)
	if err != nil {
		return access.Rules{}, true, fmt.Errorf("ConfigMap %s/%s: %w", namespace, isov1.NodeAccessConfigMap, err)
	}
	return rules, true, nil
}
