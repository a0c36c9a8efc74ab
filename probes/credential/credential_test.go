package credential

import (
	"strings"
	"testing"
)

func TestKeysAndTokensAreBoundToWhatTheyAreFor(t *testing.T) {
	master := []byte(strings.Repeat("m", KeyBytes))
	other := []byte(strings.Repeat("o", KeyBytes))
	k := Key(master, "uid-a")
	for name, tc := range map[string]struct {
		a, b string
		same bool
	}{
		"the same crawler, the same key":                  {Encode(k), Encode(Key(master, "uid-a")), true},
		"another crawler, another key":                    {Encode(k), Encode(Key(master, "uid-b")), false},
		"another master, another key":                     {Encode(k), Encode(Key(other, "uid-a")), false},
		"the names' key is no crawler's":                  {Encode(NameKey(master)), Encode(Key(master, "")), false},
		"the same window, the same token":                 {Token(k, "n1"), Token(k, "n1"), true},
		"another window, another token":                   {Token(k, "n1"), Token(k, "n2"), false},
		"another crawler's token":                         {Token(k, "n1"), Token(Key(master, "uid-b"), "n1"), false},
		"a token is not the key's MAC of the nonce alone": {Token(k, "n1"), Encode(mac(k, "n1")), false},
	} {
		t.Run(name, func(t *testing.T) {
			if got := Equal(tc.a, tc.b); got != tc.same {
				t.Errorf("Equal(%s, %s) = %v, want %v", tc.a, tc.b, got, tc.same)
			}
		})
	}
	if len(k) != KeyBytes {
		t.Errorf("a crawler's key has %d bytes, want %d", len(k), KeyBytes)
	}
}

func TestParse(t *testing.T) {
	k := Key([]byte("master"), "uid")
	for name, tc := range map[string]struct {
		in, wantErr string
	}{
		"as written":        {in: Encode(k)},
		"with a line break": {in: Encode(k) + "\n"},
		"not hex":           {in: "zz", wantErr: "--key-file is not a hex-encoded key"},
		"too short":         {in: "abcd", wantErr: "--key-file holds a key of 2 bytes, want 32"},
		"empty":             {in: "", wantErr: "--key-file holds a key of 0 bytes"},
	} {
		t.Run(name, func(t *testing.T) {
			got, err := Parse("--key-file", tc.in)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatal(err)
			case tc.wantErr == "" && Encode(got) != Encode(k):
				t.Errorf("Parse = %x, want %x", got, k)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Errorf("Parse(%q) = %v, want an error containing %q", tc.in, err, tc.wantErr)
			}
		})
	}
}

func TestNoncesDiffer(t *testing.T) {
	seen := map[string]bool{}
	for range 100 {
		n, err := NewNonce()
		if err != nil {
			t.Fatal(err)
		}
		if seen[n] {
			t.Fatalf("nonce %s drawn twice", n)
		}
		seen[n] = true
	}
}
