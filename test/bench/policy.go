package main

import (
	"context"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/drastack/drastack/internal/allocator"
)

// withPolicy is an engine whose sessions allocate under one placement
// policy, whatever the caller's Options say about it.
type withPolicy struct {
	allocator.Engine
	policy allocator.PlacementPolicy
}

func (e withPolicy) Name() string { return e.Engine.Name() + "-" + string(e.policy) }

func (e withPolicy) NewSession(ctx context.Context, in allocator.Inputs) (allocator.Session, error) {
	s, err := e.Engine.NewSession(ctx, in)
	if err != nil {
		return nil, err
	}
	return policySession{s, e.policy}, nil
}

type policySession struct {
	allocator.Session
	policy allocator.PlacementPolicy
}

func (s policySession) Allocate(ctx context.Context, claims []*resourceapi.ResourceClaim, opts allocator.Options) ([]allocator.Result, error) {
	opts.Policy = s.policy
	return s.Session.Allocate(ctx, claims, opts)
}
