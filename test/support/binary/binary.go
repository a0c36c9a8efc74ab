// Package binary runs isochron's own binaries in tests as their images ship them: built
// static from ./cmd, given a kubeconfig for the test's API server, their output kept.
package binary

import (
	"bytes"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// Build builds ./cmd/<name> static (CGO_ENABLED=0, -trimpath), as the images ship it,
// into the test's temporary directory and returns its path.
func Build(t *testing.T, name string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), name)
	build := exec.Command("go", "build", "-trimpath", "-o", bin, "isochron.io/isochron/cmd/"+name)
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the %s: %v\n%s", name, err, out)
	}
	return bin
}

// Kubeconfig writes a kubeconfig for the API server cfg names, authenticated as auth
// (a token, or the client certificate of cfg), in namespace, and returns its path.
func Kubeconfig(t *testing.T, cfg *rest.Config, auth *clientcmdapi.AuthInfo, namespace string) string {
	t.Helper()
	kc := clientcmdapi.NewConfig()
	kc.Clusters["envtest"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["user"] = auth
	kc.Contexts["user"] = &clientcmdapi.Context{Cluster: "envtest", AuthInfo: "user", Namespace: namespace}
	kc.CurrentContext = "user"
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// FreePort is a loopback address with a port nothing listens on now.
func FreePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// Log is a binary's output, which its output goroutines and the test share.
type Log struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *Log) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *Log) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
