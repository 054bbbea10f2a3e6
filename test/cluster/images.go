package cluster

import (
	"context"
	"fmt"
	"io/fs"
	"os/exec"
	"runtime"
	"strings"

	"github.com/drastack/drastack/internal/images"
	"github.com/drastack/drastack/internal/ociimage"
)

// GoBuild compiles a package of this module (for example
// "./cmd/manager") for this machine into a binary at out, as images hold
// them (images.GoBuild). It runs in the module root, so it works from any
// test folder; the Go build cache makes a second build of unchanged code
// take about a second.
func GoBuild(ctx context.Context, out, pkg string) error {
	root, err := moduleRoot()
	if err != nil {
		return err
	}
	return images.GoBuild(ctx, root, out, pkg, runtime.GOARCH)
}

// BuildPauseImage is the sandbox image: the pause program alone.
func BuildPauseImage(pausePath string) (*ociimage.Built, error) {
	f, err := ociimage.FromDisk(pausePath, "/pause")
	if err != nil {
		return nil, err
	}
	return ociimage.Build(ociimage.Image{
		Files:  []ociimage.File{f},
		Config: ociimage.Config{Entrypoint: []string{"/pause"}, User: "65535:65535"},
	})
}

// BuildBusyboxImage is a shell image for test pods: a static busybox at
// /bin/busybox, a link in /bin for each of its applets (sh, cat, env,
// sleep, ...), a world-writable /tmp and an /etc/passwd naming root and
// nobody.
func BuildBusyboxImage(ctx context.Context, busyboxPath string) (*ociimage.Built, error) {
	bb, err := ociimage.FromDisk(busyboxPath, "/bin/busybox")
	if err != nil {
		return nil, err
	}
	list, err := exec.CommandContext(ctx, busyboxPath, "--list").Output()
	if err != nil {
		return nil, fmt.Errorf("busybox --list: %w", err)
	}
	files := []ociimage.File{
		bb,
		{Path: "/tmp", Mode: fs.ModeDir | fs.ModeSticky | 0o777},
		{Path: "/etc/passwd", Mode: 0o644, Data: []byte("root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n")},
	}
	for _, applet := range strings.Fields(string(list)) {
		if applet == "busybox" || strings.Contains(applet, "/") {
			continue
		}
		files = append(files, ociimage.File{Path: "/bin/" + applet, Mode: fs.ModeSymlink, Linkname: "busybox"})
	}
	return ociimage.Build(ociimage.Image{
		Files:  files,
		Config: ociimage.Config{Cmd: []string{"/bin/sh"}, Env: []string{"PATH=/bin"}},
	})
}
