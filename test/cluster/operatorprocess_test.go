package cluster

import (
	"fmt"
	"testing"
)

func TestOverrideFlags(t *testing.T) {
	tests := []struct {
		name     string
		args     []string
		override map[string]string
		want     []string
	}{
		{"nothing to change", []string{"--leader-elect", "--webhook-port=9443"}, nil, []string{"--leader-elect", "--webhook-port=9443"}},
		{"a value replaced", []string{"--leader-elect", "--webhook-port=9443"}, map[string]string{"--webhook-port": "1234"},
			[]string{"--leader-elect", "--webhook-port=1234"}},
		{"a boolean flag given a value", []string{"--leader-elect"}, map[string]string{"--leader-elect": "false"}, []string{"--leader-elect=false"}},
		{"new flags appended in order", []string{"--a=1"}, map[string]string{"--z": "2", "--b": "3"}, []string{"--a=1", "--b=3", "--z=2"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := OverrideFlags(tt.args, tt.override)
			if fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Errorf("OverrideFlags(%v, %v) = %v, want %v", tt.args, tt.override, got, tt.want)
			}
		})
	}
}

func TestDeploymentArgs(t *testing.T) {
	args, err := DeploymentArgs("../../config/default", map[string]string{"--webhook-port": "1234", "--webhook-host": "127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	// --memory-limit=$(MEMORY_LIMIT) is expanded as the kubelet does, from
	// the container's limits.memory (1Gi).
	want := map[string]bool{"--leader-elect": false, "--webhook-port=1234": false, "--webhook-host=127.0.0.1": false,
		"--memory-limit=1073741824": false}
	for _, a := range args {
		if _, ok := want[a]; ok {
			want[a] = true
		}
		if a == "--webhook-port=9443" {
			t.Errorf("the shipped webhook port was not replaced: %v", args)
		}
	}
	for a, seen := range want {
		if !seen {
			t.Errorf("args %v lack %s", args, a)
		}
	}
}
