package main

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// The e2e guest has no cloud-init and no shell, so it does for isochron's cloud-init part
// what a cloud image does (docs/probes.md, "The agent"): it finds the NoCloud disk
// (ISO 9660, volume "cidata") and in its user-data the part "# isochron: probe agent",
// copies the agent out of the disk whose serial is isochron-agent, writes the probe key
// of the part's k=... line to the file its --key-file names (root only), and runs the
// agent with the arguments of the part's a="..." line. Everything the operator rendered
// is used as rendered.

const (
	agentSerial = "isochron-agent"
	agentPath   = "/isochron-agent"
	sector      = 2048 // ISO 9660 logical block
)

// startAgent runs isochron's probe agent when the VM has one, in the background.
func startAgent() {
	var agentDev, cidataDev string
	// The disks appear as virtio-blk probes them, after its module loaded.
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline) && (agentDev == "" || cidataDev == ""); time.Sleep(100 * time.Millisecond) {
		agentDev, cidataDev = findDisks()
	}
	if agentDev == "" {
		logf("agent: no disk with serial %s: none to run", agentSerial)
		return
	}
	if cidataDev == "" {
		logf("agent: no NoCloud disk (cidata): the agent's arguments are unknown")
		return
	}
	userData, err := readISOFile(cidataDev, "user-data")
	if err != nil {
		logf("agent: reading user-data from %s: %v", cidataDev, err)
		return
	}
	args, key, err := agentArgs(userData)
	if err != nil {
		logf("agent: %v", err)
		return
	}
	if err := writeKey(args, key); err != nil {
		logf("agent: writing the probe key: %v", err)
		return
	}
	if err := copyFile(agentDev, agentPath, 0o755); err != nil {
		logf("agent: copying %s: %v", agentDev, err)
		return
	}
	cmd := exec.Command(agentPath, args...)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stdout
	if err := cmd.Start(); err != nil {
		logf("agent: %v", err)
		return
	}
	logf("agent: %s %s (pid %d)", agentPath, strings.Join(args, " "), cmd.Process.Pid)
}

// findDisks returns the device of the agent's disk and of the NoCloud disk, "" for one
// not found.
func findDisks() (agent, cidata string) {
	blocks, _ := filepath.Glob("/sys/block/vd*")
	for _, b := range blocks {
		dev := "/dev/" + filepath.Base(b)
		serial, _ := os.ReadFile(filepath.Join(b, "serial"))
		if strings.TrimSpace(string(serial)) == agentSerial {
			agent = dev
			continue
		}
		if id, err := isoVolumeID(dev); err == nil && strings.EqualFold(id, "cidata") {
			cidata = dev
		}
	}
	return agent, cidata
}

// isoVolumeID is the volume identifier of an ISO 9660 image, an error for anything else.
func isoVolumeID(dev string) (string, error) {
	f, err := os.Open(dev)
	if err != nil {
		return "", err
	}
	defer f.Close()
	pvd := make([]byte, sector)
	if _, err := f.ReadAt(pvd, 16*sector); err != nil {
		return "", err
	}
	if pvd[0] != 1 || string(pvd[1:6]) != "CD001" {
		return "", errors.New("not ISO 9660")
	}
	return strings.TrimSpace(string(pvd[40:72])), nil
}

// readISOFile reads the file name from the root directory of the ISO 9660 image dev,
// named by its Rock Ridge name (as xorriso writes KubeVirt's NoCloud disk) or its ISO 9660
// name.
func readISOFile(dev, name string) ([]byte, error) {
	f, err := os.Open(dev)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return isoFile(f, name)
}

func isoFile(r io.ReaderAt, name string) ([]byte, error) {
	pvd := make([]byte, sector)
	if _, err := r.ReadAt(pvd, 16*sector); err != nil {
		return nil, err
	}
	if pvd[0] != 1 || string(pvd[1:6]) != "CD001" {
		return nil, errors.New("not an ISO 9660 image")
	}
	root := pvd[156 : 156+34]
	dir := make([]byte, binary.LittleEndian.Uint32(root[10:14]))
	if _, err := r.ReadAt(dir, int64(binary.LittleEndian.Uint32(root[2:6]))*sector); err != nil {
		return nil, err
	}
	for off := 0; off < len(dir); {
		n := int(dir[off])
		if n == 0 { // records do not cross a block: the rest of this one is padding
			off = (off/sector + 1) * sector
			continue
		}
		rec := dir[off : off+n]
		off += n
		idLen := int(rec[32])
		id := string(rec[33 : 33+idLen])
		su := rec[33+idLen+(1-idLen%2):] // the system use area, after a pad byte when the id's length is even
		if rrName(su) == name || isoNameMatches(id, name) {
			data := make([]byte, binary.LittleEndian.Uint32(rec[10:14]))
			if _, err := r.ReadAt(data, int64(binary.LittleEndian.Uint32(rec[2:6]))*sector); err != nil {
				return nil, err
			}
			return data, nil
		}
	}
	return nil, fmt.Errorf("no %s in the image's root directory", name)
}

// rrName is the Rock Ridge alternate name (NM entries) in a system use area, "" if none.
func rrName(su []byte) string {
	var name []byte
	for len(su) >= 4 {
		l := int(su[2])
		if l < 4 || l > len(su) {
			break
		}
		if string(su[0:2]) == "NM" && l >= 5 {
			name = append(name, su[5:l]...)
		}
		su = su[l:]
	}
	return string(name)
}

// isoNameMatches compares an ISO 9660 identifier ("USER_DAT.;1") with name: upper case,
// '-' as '_', the version dropped.
func isoNameMatches(id, name string) bool {
	id, _, _ = strings.Cut(id, ";")
	id = strings.TrimSuffix(id, ".")
	return id != "" && id == strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

// agentArgs are the agent's arguments in isochron's part of the user data, the words of
// its a="..." line, and the probe key of its k=... line ("" for none). The user data is
// isochron's part alone or a MIME multipart document of the user's part and isochron's.
func agentArgs(userData []byte) (args []string, key string, err error) {
	for _, part := range userDataParts(userData) {
		if !bytes.Contains(part, []byte("\n# isochron: probe agent")) {
			continue
		}
		for _, line := range strings.Split(string(part), "\n") {
			if v, ok := strings.CutPrefix(line, "k="); ok {
				key = v
			}
			if v, ok := strings.CutPrefix(line, `a="`); ok {
				args = strings.Fields(strings.TrimSuffix(v, `"`))
			}
		}
		if args == nil {
			return nil, "", errors.New("isochron's part has no a=\"...\" line")
		}
		return args, key, nil
	}
	return nil, "", errors.New("no part of isochron's in the user data")
}

// writeKey writes key to the file the agent's --key-file names, as isochron's part does
// ((umask 077; echo $k >file)); nothing without one.
func writeKey(args []string, key string) error {
	for _, a := range args {
		if file, ok := strings.CutPrefix(a, "--key-file="); ok {
			if key == "" {
				return fmt.Errorf("the agent reads %s and isochron's part has no k= line", file)
			}
			if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
				return err
			}
			return os.WriteFile(file, []byte(key+"\n"), 0o600)
		}
	}
	return nil
}

// userDataParts are the documents of a user-data file: the parts of a MIME multipart
// document, or the file itself.
func userDataParts(data []byte) [][]byte {
	header, body, ok := bytes.Cut(data, []byte("\n\n"))
	if !ok || !bytes.HasPrefix(header, []byte("Content-Type: multipart/")) {
		return [][]byte{data}
	}
	first, _, _ := bytes.Cut(header, []byte("\n"))
	_, params, err := mime.ParseMediaType(strings.TrimPrefix(string(first), "Content-Type: "))
	if err != nil {
		return [][]byte{data}
	}
	var parts [][]byte
	r := multipart.NewReader(bytes.NewReader(body), params["boundary"])
	for {
		p, err := r.NextPart()
		if err != nil {
			return parts
		}
		b, _ := io.ReadAll(p)
		parts = append(parts, b)
	}
}

func copyFile(src, dst string, mode os.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
