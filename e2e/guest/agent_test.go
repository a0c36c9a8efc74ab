package main

import (
	"bytes"
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	isov1 "isochron.io/isochron/api/v1alpha1"
	"isochron.io/isochron/internal/inventory"
	"isochron.io/isochron/internal/model"
	"isochron.io/isochron/internal/render"
	"isochron.io/isochron/internal/sizing"
	"isochron.io/isochron/probes/credential"
)

// The guest reads the agent's arguments from the user data exactly as the operator
// renders it: with the user's own part (MIME multipart) and without.
func TestAgentArgsFromRenderedUserData(t *testing.T) {
	for name, user := range map[string]string{"isochron's part alone": "", "with the user's part": "#cloud-config\nruncmd: [crawler]\n"} {
		t.Run(name, func(t *testing.T) {
			c := &isov1.CrawlerVM{ObjectMeta: metav1.ObjectMeta{Namespace: "e2e-x", Name: "shared", UID: "u"}}
			c.Spec = isov1.CrawlerVMSpec{
				RPS: 5, ErrorBudget: isov1.ErrorBudget{Tolerance: metav1.Duration{Duration: 100 * time.Millisecond}},
				Guest:        isov1.Guest{Image: "guest", Memory: resource.MustParse("256Mi"), CloudInitUserData: user},
				CPUPlacement: isov1.CPUPlacementShared,
			}
			s, _ := sizing.Size(inventory.Demand(&c.Spec), model.DefaultParams())
			key := credential.Key([]byte("master"), string(c.UID))
			// The user data KubeVirt puts on the NoCloud disk: the guest Secret's.
			secret, err := render.GuestSecret(render.Input{CrawlerVM: c, Sizing: s, Node: "n", Agent: &render.Agent{
				Image: "isochron/rtprobe:v0.1.0", Gateways: []string{"http://shared-probe.e2e-x.svc:8080", "http://10.96.0.9:8080"}, Key: key,
			}})
			if err != nil {
				t.Fatal(err)
			}
			got, gotKey, err := agentArgs(secret.Data[render.SecretKeyUserData])
			if err != nil {
				t.Fatal(err)
			}
			want := []string{"agent", "--gateway=http://shared-probe.e2e-x.svc:8080,http://10.96.0.9:8080", "--key-file=" + render.AgentKeyFile}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("agent arguments (-want +got):\n%s", diff)
			}
			if gotKey != credential.Encode(key) {
				t.Errorf("probe key %q, want %q", gotKey, credential.Encode(key))
			}
			// The key lands where the agent reads it, for root alone.
			file := filepath.Join(t.TempDir(), "etc", "isochron", "probe-key")
			if err := writeKey([]string{"agent", "--key-file=" + file}, gotKey); err != nil {
				t.Fatal(err)
			}
			b, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			if k, err := credential.Parse("the key file", string(b)); err != nil || credential.Encode(k) != credential.Encode(key) {
				t.Errorf("key file holds %q (%v), want the crawler's key", b, err)
			}
			if fi, _ := os.Stat(file); fi.Mode().Perm() != 0o600 {
				t.Errorf("key file mode %v, want 0600", fi.Mode().Perm())
			}
		})
	}
	if _, _, err := agentArgs([]byte("#cloud-config\n")); err == nil {
		t.Error("agentArgs found arguments in user data without isochron's part")
	}
}

// isoImage is an ISO 9660 image whose root directory holds files, each under its ISO
// name and, when rr is set, a Rock Ridge name.
func isoImage(files []struct{ iso, rr, data string }) []byte {
	const blk = sector
	img := make([]byte, 32*blk)
	record := func(id string, rr string, lba, size uint32) []byte {
		su := []byte{}
		if rr != "" {
			su = append([]byte{'N', 'M', byte(5 + len(rr)), 1, 0}, rr...)
		}
		pad := 1 - len(id)%2
		n := 33 + len(id) + pad + len(su)
		n += n % 2
		r := make([]byte, n)
		r[0] = byte(n)
		binary.LittleEndian.PutUint32(r[2:], lba)
		binary.LittleEndian.PutUint32(r[10:], size)
		r[32] = byte(len(id))
		copy(r[33:], id)
		copy(r[33+len(id)+pad:], su)
		return r
	}
	var dir []byte
	dir = append(dir, record("\x00", "", 18, blk)...)
	dir = append(dir, record("\x01", "", 18, blk)...)
	lba := uint32(19)
	for _, f := range files {
		dir = append(dir, record(f.iso, f.rr, lba, uint32(len(f.data)))...)
		copy(img[lba*blk:], f.data)
		lba++
	}
	copy(img[18*blk:], dir)
	pvd := img[16*blk:]
	pvd[0] = 1
	copy(pvd[1:], "CD001")
	copy(pvd[40:], "cidata                          ")
	copy(pvd[156:], record("\x00", "", 18, blk))
	return img
}

func TestISOFile(t *testing.T) {
	img := isoImage([]struct{ iso, rr, data string }{
		{iso: "META_DAT.;1", rr: "meta-data", data: "instance-id: x\n"},
		{iso: "USER_DAT.;1", rr: "user-data", data: "#cloud-config\n"},
		{iso: "NETWORK_.;1", data: "version: 2\n"},
	})
	for name, want := range map[string]string{"user-data": "#cloud-config\n", "meta-data": "instance-id: x\n"} {
		got, err := isoFile(bytes.NewReader(img), name)
		if err != nil || string(got) != want {
			t.Errorf("isoFile(%s) = %q, %v; want %q", name, got, err, want)
		}
	}
	// Without Rock Ridge the ISO 9660 name is matched.
	plain := isoImage([]struct{ iso, rr, data string }{{iso: "USER_DATA.;1", data: "x"}})
	if got, err := isoFile(bytes.NewReader(plain), "user-data"); err != nil || string(got) != "x" {
		t.Errorf("isoFile without Rock Ridge = %q, %v", got, err)
	}
	if _, err := isoFile(bytes.NewReader(img), "vendor-data"); err == nil {
		t.Error("isoFile found a file the image does not hold")
	}
	if _, err := isoFile(bytes.NewReader(make([]byte, 20*sector)), "user-data"); err == nil {
		t.Error("isoFile read an image that is not ISO 9660")
	}
}
