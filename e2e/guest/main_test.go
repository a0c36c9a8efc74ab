package main

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"testing"
)

func TestParseCmdline(t *testing.T) {
	for _, tc := range []struct {
		cmdline string
		want    netConfig
		wantErr bool
	}{
		{cmdline: "console=ttyS0 quiet panic=-1\n"},
		{
			cmdline: "console=ttyS0 isochron.ip=10.0.2.2/24 isochron.gw=10.0.2.1 quiet\n",
			want:    netConfig{Addr: netip.MustParsePrefix("10.0.2.2/24"), GW: netip.MustParseAddr("10.0.2.1")},
		},
		{cmdline: "isochron.ip=192.168.1.5/30", want: netConfig{Addr: netip.MustParsePrefix("192.168.1.5/30")}},
		{cmdline: "isochron.ip=10.0.2.2", wantErr: true},
		{cmdline: "isochron.ip=fd00::2/64", wantErr: true},
		{cmdline: "isochron.ip=10.0.2.2/24 isochron.gw=nope", wantErr: true},
		{cmdline: "isochron.gw=10.0.2.1", wantErr: true},
	} {
		got, err := parseCmdline(tc.cmdline)
		if (err != nil) != tc.wantErr || got != tc.want {
			t.Errorf("parseCmdline(%q) = %+v, %v; want %+v, error %v", tc.cmdline, got, err, tc.want, tc.wantErr)
		}
	}
}

func TestAppendAttrPads(t *testing.T) {
	got := appendAttr([]byte{9}, 3, []byte{1, 2, 3, 4, 5})
	// 1 byte before, then len 9 (4 header + 5 data), type 3, data, padding to 12 bytes.
	if len(got) != 12 || got[0] != 9 || binary.NativeEndian.Uint16(got[1:]) != 9 ||
		binary.NativeEndian.Uint16(got[3:]) != 3 || !bytes.Equal(got[5:], []byte{1, 2, 3, 4, 5, 0, 0}) {
		t.Errorf("appendAttr = %v", got)
	}
}
