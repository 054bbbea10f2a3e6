package ledger

import (
	"context"
	"testing"

	"github.com/drastack/drastack/internal/allocator/native"
)

// Once a session exists, or a build has read its slices, only node label
// changes on keys its slices or the configuration select on rebuild it;
// changes while a build reads the caches are judged when it knows its keys.
func TestLabelsMatter(t *testing.T) {
	l, _ := readyLedger(1)
	added := map[string]string{"beta.kubernetes.io/arch": "amd64"}
	if !l.LabelsMatter(nil, added) {
		t.Fatal("without a session every label change must count")
	}
	if err := l.Decide(context.Background(), "ns", native.New(), func(*Decision) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if l.LabelsMatter(nil, added) {
		t.Errorf("a label no slice or entry selects on rebuilt the session (keys %v)", l.sess.cur.labelKeys)
	}
	l.sess.cur.labelKeys = map[string]bool{"tpu-domain": true} // as a slice with a per-device node selector on it
	if !l.LabelsMatter(map[string]string{"tpu-domain": "d1"}, map[string]string{"tpu-domain": "d2"}) {
		t.Error("a change of a selected label must count")
	}
	l.Invalidate()
	if !l.LabelsMatter(nil, added) {
		t.Error("after an invalidation every label change must count again")
	}
	// A build that has read the caches judges by the keys of what it read.
	l.mu.Lock()
	l.sess.build = buildState{building: true, keys: map[string]bool{"tpu-domain": true}}
	l.mu.Unlock()
	if l.LabelsMatter(nil, added) {
		t.Error("a label the build does not select on made it stale")
	}
	if !l.LabelsMatter(nil, map[string]string{"tpu-domain": "d1"}) {
		t.Error("a label the build selects on must make it stale")
	}

	// A build that has not read the caches yet judges the changes made
	// meanwhile once it knows its keys.
	for _, tc := range []struct {
		name  string
		old   map[string]string
		cur   map[string]string
		stale bool
	}{
		{name: "a label no slice selects on is added", cur: added},
		{name: "a selected label changes", old: map[string]string{"tpu-domain": "d1"}, cur: map[string]string{"tpu-domain": "d2"}, stale: true},
		{name: "a selected label is removed", old: map[string]string{"tpu-domain": "d1", "x": "y"}, cur: map[string]string{"x": "y"}, stale: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l.mu.Lock()
			l.sess.build = buildState{building: true}
			version := l.sess.version
			l.mu.Unlock()
			if l.LabelsMatter(tc.old, tc.cur) {
				t.Error("a label change before the build read its slices invalidated it at once")
			}
			l.mu.Lock()
			defer l.mu.Unlock()
			if l.sess.version != version {
				t.Fatal("the version changed before the build knew its keys")
			}
			current := l.keysRead(version, map[string]bool{"tpu-domain": true})
			if current == tc.stale || (l.sess.version != version) != tc.stale {
				t.Errorf("keysRead: current %v, version %d -> %d; want stale %v", current, version, l.sess.version, tc.stale)
			}
			if !tc.stale && !l.sess.build.keys["tpu-domain"] {
				t.Errorf("a current build judges later changes by its keys, has %v", l.sess.build.keys)
			}
			if l.sess.build.changed != nil {
				t.Errorf("changes kept after the build read its keys: %v", l.sess.build.changed)
			}
		})
	}
}
