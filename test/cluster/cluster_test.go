package cluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

func TestTailLines(t *testing.T) {
	var b strings.Builder
	for i := 1; i <= 100; i++ {
		fmt.Fprintf(&b, "line %d\n", i)
	}
	tests := []struct {
		name string
		data string
		n    int
		want string
	}{
		{"empty", "", 5, ""},
		{"fewer lines than asked", "a\nb\n", 5, "a\nb"},
		{"no trailing newline", "a\nb", 1, "b"},
		{"last n of many", b.String(), 3, "line 98\nline 99\nline 100"},
		{"zero lines", "a\n", 0, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tailLines([]byte(tt.data), tt.n); got != tt.want {
				t.Errorf("tailLines = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestReadTailOfLargeLog(t *testing.T) {
	path := filepath.Join(t.TempDir(), "big.log")
	var b strings.Builder
	lines := 2 * logTailMaxBytes / 10 // well past the read window
	for i := range lines {
		fmt.Fprintf(&b, "%09d\n", i)
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := readTail(path)
	if err != nil {
		t.Fatal(err)
	}
	gotLines := strings.Split(got, "\n")
	if len(gotLines) != logTailLines {
		t.Fatalf("got %d lines, want %d", len(gotLines), logTailLines)
	}
	if want := fmt.Sprintf("%09d", lines-1); gotLines[len(gotLines)-1] != want {
		t.Errorf("last line %q, want %q", gotLines[len(gotLines)-1], want)
	}
	if want := fmt.Sprintf("%09d", lines-logTailLines); gotLines[0] != want {
		t.Errorf("first line %q, want %q", gotLines[0], want)
	}
}

func TestWithLogTailKeepsTheCause(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.log")
	if err := os.WriteFile(path, []byte("starting\nF0101 fatal: port in use\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cause := errors.New("exited")
	err := withLogTail(cause, path)
	if !errors.Is(err, cause) {
		t.Error("the wrapped error must unwrap to its cause")
	}
	for _, want := range []string{"exited", "fatal: port in use", path} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	if err := withLogTail(cause, filepath.Join(t.TempDir(), "missing.log")); !strings.Contains(err.Error(), "could not read log") {
		t.Errorf("a missing log should be reported, got %q", err)
	}
}

// fakeBinaries writes executable scripts for every control plane binary;
// scripts maps a name to its body, the others exit at once.
func fakeBinaries(t *testing.T, scripts map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for _, b := range Binaries {
		body, ok := scripts[b]
		if !ok {
			body = "exit 0"
		}
		if err := os.WriteFile(filepath.Join(dir, b), []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestResolveBinaryDir(t *testing.T) {
	complete := fakeBinaries(t, nil)
	partial := fakeBinaries(t, nil)
	if err := os.Remove(filepath.Join(partial, "kwok")); err != nil {
		t.Fatal(err)
	}
	notExec := fakeBinaries(t, nil)
	if err := os.Chmod(filepath.Join(notExec, "etcd"), 0o644); err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name     string
		explicit string
		env      string
		want     string // folder, or "error:<substring>"
	}{
		{"explicit folder wins", complete, partial, complete},
		{"environment variable is used when nothing is explicit", "", complete, complete},
		{"a missing binary is named", partial, "", "error:lacks kwok"},
		{"a binary without execute permission counts as missing", notExec, "", "error:lacks etcd"},
		{"the error says how to build", partial, "", "error:hack/build-k8s.sh"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv(BinaryDirEnv, tt.env)
			got, err := ResolveBinaryDir(tt.explicit)
			if want, ok := strings.CutPrefix(tt.want, "error:"); ok {
				if err == nil || !strings.Contains(err.Error(), want) {
					t.Fatalf("err = %v, want one containing %q", err, want)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("ResolveBinaryDir = %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}

func TestModuleRootFromAPackageFolder(t *testing.T) {
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "test", "cluster", "cluster.go")); err != nil {
		t.Errorf("module root %s does not contain this package: %v", root, err)
	}
}

func TestNewNode(t *testing.T) {
	custom := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4")}
	tests := []struct {
		name         string
		spec         NodeSpec
		wantLabels   map[string]string
		wantCapacity corev1.ResourceList
	}{
		{
			name:         "defaults",
			spec:         NodeSpec{Name: "n1"},
			wantLabels:   map[string]string{"type": "kwok", corev1.LabelHostname: "n1", corev1.LabelOSStable: "linux", corev1.LabelArchStable: "amd64"},
			wantCapacity: DefaultNodeCapacity(),
		},
		{
			name:         "extra labels and capacity; labels may override defaults",
			spec:         NodeSpec{Name: "n2", Labels: map[string]string{"gpu": "a100", "type": "special"}, Capacity: custom},
			wantLabels:   map[string]string{"type": "special", "gpu": "a100", corev1.LabelHostname: "n2", corev1.LabelOSStable: "linux", corev1.LabelArchStable: "amd64"},
			wantCapacity: custom,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := NewNode(tt.spec)
			if n.Name != tt.spec.Name || n.Annotations[KwokNodeAnnotation] != "fake" {
				t.Errorf("name/annotation = %s/%v", n.Name, n.Annotations)
			}
			if fmt.Sprint(n.Labels) != fmt.Sprint(tt.wantLabels) {
				t.Errorf("labels = %v, want %v", n.Labels, tt.wantLabels)
			}
			for _, rl := range []corev1.ResourceList{n.Status.Capacity, n.Status.Allocatable} {
				if len(rl) != len(tt.wantCapacity) {
					t.Fatalf("resources = %v, want %v", rl, tt.wantCapacity)
				}
				for k, v := range tt.wantCapacity {
					if q := rl[k]; q.Cmp(v) != 0 {
						t.Errorf("%s = %s, want %s", k, q.String(), v.String())
					}
				}
			}
			if len(n.Spec.Taints) != 0 {
				t.Error("kwok nodes must not be tainted, or ordinary pods would not schedule")
			}
		})
	}
}

func TestNodeReady(t *testing.T) {
	cond := func(s corev1.ConditionStatus) *corev1.Node {
		return &corev1.Node{Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{
			{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionFalse},
			{Type: corev1.NodeReady, Status: s},
		}}}
	}
	if !NodeReady(cond(corev1.ConditionTrue)) || NodeReady(cond(corev1.ConditionFalse)) || NodeReady(cond(corev1.ConditionUnknown)) || NodeReady(&corev1.Node{}) {
		t.Error("NodeReady must be true exactly when Ready=True")
	}
}

func TestStartReportsTheFailingComponentsLog(t *testing.T) {
	dir := fakeBinaries(t, map[string]string{
		"etcd": `echo "etcd starting"; echo "fatal: simulated etcd failure: data dir is locked" >&2; exit 1`,
	})
	logDir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := Start(ctx, Options{BinaryDir: dir, LogDir: logDir, StartTimeout: 10 * time.Second})
	if err == nil {
		_ = c.Stop()
		t.Fatal("Start succeeded with a failing etcd")
	}
	t.Logf("start error:\n%v", err)
	for _, want := range []string{"simulated etcd failure", "etcd.log", "last lines of"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
	if _, statErr := os.Stat(filepath.Join(logDir, "etcd.log")); statErr != nil {
		t.Errorf("a log folder named by the caller must survive a failed start: %v", statErr)
	}
}

func TestRemoveStaleClusterDirs(t *testing.T) {
	tmp := t.TempDir()
	mk := func(name, owner string) string {
		d := filepath.Join(tmp, name)
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if owner != "" {
			if err := os.WriteFile(filepath.Join(d, ownerFile), []byte(owner), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		return d
	}
	// A pid far above pid_max belongs to no process.
	dead := mk(clusterDirPattern+"dead", "2147483000")
	alive := mk(clusterDirPattern+"alive", strconv.Itoa(os.Getpid()))
	unowned := mk(clusterDirPattern+"unowned", "")
	other := mk("something-else", "2147483000")

	removeStaleClusterDirs(tmp)

	for dir, wantExists := range map[string]bool{dead: false, alive: true, unowned: true, other: true} {
		_, err := os.Stat(dir)
		if exists := err == nil; exists != wantExists {
			t.Errorf("%s exists=%v, want %v", filepath.Base(dir), exists, wantExists)
		}
	}
}
