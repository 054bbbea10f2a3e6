package simdriver

import (
	"strings"
	"testing"
)

func TestParseInventory(t *testing.T) {
	const gpu = "- kind: gpu\n    count: 1\n"
	tests := []struct {
		name    string
		yaml    string
		wantErr string // substring; empty means valid
	}{
		{
			name: "minimal driver is valid",
			yaml: "drivers:\n- name: gpu.example.com\n  devices:\n  " + gpu,
		},
		{
			name:    "no drivers",
			yaml:    "drivers: []\n",
			wantErr: "at least one driver",
		},
		{
			name:    "unknown field is an error, not ignored",
			yaml:    "drivers:\n- name: gpu.example.com\n  devices:\n  - kind: gpu\n    count: 1\n    colour: red\n",
			wantErr: "colour",
		},
		{
			name:    "driver name must be a DNS subdomain",
			yaml:    "drivers:\n- name: GPU_Example\n  devices:\n  " + gpu,
			wantErr: "drivers[0].name",
		},
		{
			name:    "driver name at most 63 characters",
			yaml:    "drivers:\n- name: " + strings.Repeat("a", 60) + ".com\n  devices:\n  " + gpu,
			wantErr: "longer than 63",
		},
		{
			name:    "pool suffix must be a DNS label",
			yaml:    "drivers:\n- name: gpu.example.com\n  pool: a.b\n  devices:\n  " + gpu,
			wantErr: "drivers[0].pool",
		},
		{
			name:    "node selector labels are validated",
			yaml:    "drivers:\n- name: gpu.example.com\n  nodeSelector:\n    'bad key!': x\n  devices:\n  " + gpu,
			wantErr: "nodeSelector",
		},
		{
			name:    "a driver needs devices",
			yaml:    "drivers:\n- name: gpu.example.com\n  devices: []\n",
			wantErr: "at least one device group",
		},
		{
			name:    "unknown kind",
			yaml:    "drivers:\n- name: gpu.example.com\n  devices:\n  - kind: fpga\n    count: 1\n",
			wantErr: `"fpga" is not one of`,
		},
		{
			name:    "count must be positive",
			yaml:    "drivers:\n- name: gpu.example.com\n  devices:\n  - kind: gpu\n    count: 0\n",
			wantErr: "count: 0",
		},
		{
			name:    "count is bounded",
			yaml:    "drivers:\n- name: gpu.example.com\n  devices:\n  - kind: gpu\n    count: 100000\n",
			wantErr: "count: 100000",
		},
		{
			name:    "unknown partition table",
			yaml:    "drivers:\n- name: gpu.example.com\n  devices:\n  - kind: gpu\n    count: 1\n    partitions: h100-80gb\n",
			wantErr: "unknown profile table",
		},
		{
			name:    "memory must be a quantity",
			yaml:    "drivers:\n- name: gpu.example.com\n  devices:\n  - kind: gpu\n    count: 1\n    memory: lots\n",
			wantErr: "memory",
		},
		{
			name:    "fields of another kind are rejected",
			yaml:    "drivers:\n- name: nic.example.com\n  devices:\n  - kind: nic\n    count: 1\n    cores: 4\n",
			wantErr: "cores: not a field of kind nic",
		},
		{
			name:    "pcieRoots is bounded",
			yaml:    "topology:\n  pcieRoots: 99\ndrivers:\n- name: gpu.example.com\n  devices:\n  " + gpu,
			wantErr: "topology.pcieRoots",
		},
		{
			name: "broken and valid entries cannot share a driver",
			yaml: "drivers:\n- name: gpu.example.com\n  devices:\n  " + gpu +
				"- name: gpu.example.com\n  pool: bad\n  broken: true\n  devices:\n  " + gpu,
			wantErr: "has broken and valid entries",
		},
		{
			name: "two entries of one driver with different pools are fine",
			yaml: "drivers:\n- name: gpu.example.com\n  devices:\n  " + gpu +
				"- name: gpu.example.com\n  pool: extra\n  devices:\n  " + gpu,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseInventory([]byte(tt.yaml))
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tt.wantErr != "" && err == nil:
				t.Fatalf("no error, want one containing %q", tt.wantErr)
			case tt.wantErr != "" && !strings.Contains(err.Error(), tt.wantErr):
				t.Fatalf("error %q does not contain %q", err, tt.wantErr)
			}
		})
	}
}

func TestSampleInventoriesLoad(t *testing.T) {
	for _, path := range []string{"testdata/inventory.yaml", "../../config/samples/sim-inventory.yaml"} {
		inv, err := LoadInventory(path)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if len(inv.Drivers) == 0 {
			t.Fatalf("%s: no drivers", path)
		}
	}
}

func TestDriverMatches(t *testing.T) {
	d := DriverSpec{NodeSelector: map[string]string{"type": "kwok", "zone": "a"}}
	tests := []struct {
		labels map[string]string
		want   bool
	}{
		{map[string]string{"type": "kwok", "zone": "a", "extra": "x"}, true},
		{map[string]string{"type": "kwok"}, false},
		{map[string]string{"type": "kwok", "zone": "b"}, false},
		{nil, false},
	}
	for _, tt := range tests {
		if got := d.Matches(tt.labels); got != tt.want {
			t.Errorf("Matches(%v) = %v, want %v", tt.labels, got, tt.want)
		}
	}
	if !(DriverSpec{}).Matches(nil) {
		t.Error("an empty selector must match every node")
	}
}
