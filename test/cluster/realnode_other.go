//go:build !linux

package cluster

import (
	"context"
	"errors"
	"runtime"
)

// sandbox only exists on Linux.
type sandbox struct {
	nsenter    string
	namespaces []string
}

func (s *sandbox) enterArgs() []string { return nil }

// realNodes only run on Linux.
type realNodes struct{}

func (c *Cluster) prepareRealNodes() error {
	return &UnsupportedError{Missing: "not Linux (" + runtime.GOOS + ")"}
}

func (r *realNodes) configureAPIServer(any) error { return nil }

func (c *Cluster) startRealNodes(context.Context) error {
	return errors.New("real nodes need Linux")
}

func (r *realNodes) stop() error { return nil }
