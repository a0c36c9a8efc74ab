package controllers

import (
	"context"
	"errors"
	"fmt"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	isov1 "isochron.io/isochron/api/v1alpha1"
	"isochron.io/isochron/probes/credential"
)

// DefaultProbeMasterKeySecret is the Secret, in the manager's own namespace, that holds
// the master key of the crawlers' probe credentials (package credential).
const DefaultProbeMasterKeySecret = "isochron-probe-master-key"

// probeMasterKeyData is the key of the master key in its Secret.
const probeMasterKeyData = "key"

// LoadProbeMasterKey reads the probe master key from the Secret name in namespace, and
// creates the Secret with a new random key when there is none (the first manager to
// start; a replica starting beside it reads the one that won). c needs get and create on
// that one Secret: the manager's Role in its own namespace, nothing cluster-wide.
//
// Every crawler's probe key is derived from it: a changed master key (the Secret
// deleted) gives every crawler a new key, which a running guest learns only when it
// next starts; until then its probes count its agent's requests as foreign.
func LoadProbeMasterKey(ctx context.Context, c client.Client, namespace, name string) ([]byte, error) {
	if namespace == "" {
		return nil, errors.New("the manager's namespace is unknown: set --namespace (or POD_NAMESPACE)")
	}
	s := &corev1.Secret{}
	err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, s)
	if apierrors.IsNotFound(err) {
		key, kerr := credential.NewKey()
		if kerr != nil {
			return nil, kerr
		}
		s = &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, Labels: map[string]string{isov1.LabelManagedBy: isov1.ManagedBy}},
			Type:       corev1.SecretTypeOpaque,
			Data:       map[string][]byte{probeMasterKeyData: []byte(credential.Encode(key))},
		}
		err = c.Create(ctx, s)
		if apierrors.IsAlreadyExists(err) {
			err = c.Get(ctx, client.ObjectKeyFromObject(s), s)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("reading the probe master key, Secret %s/%s: %w", namespace, name, err)
	}
	key, err := credential.Parse(fmt.Sprintf("Secret %s/%s, key %q", namespace, name, probeMasterKeyData), string(s.Data[probeMasterKeyData]))
	if err != nil {
		return nil, fmt.Errorf("%w: delete the Secret and restart the manager for a new one", err)
	}
	return key, nil
}

// appliedSecrets remembers, per crawler (namespace/name), the hash of the guest Secret last applied.
type appliedSecrets struct {
	mu   sync.Mutex
	sums map[string][32]byte
}

func (a *appliedSecrets) applied(key string, sum [32]byte) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	have, ok := a.sums[key]
	return ok && have == sum
}

func (a *appliedSecrets) remember(key string, sum [32]byte) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.sums == nil {
		a.sums = map[string][32]byte{}
	}
	a.sums[key] = sum
}

func (a *appliedSecrets) forget(key string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.sums, key)
}
