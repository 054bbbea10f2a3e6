package upstream

import (
	"context"
	"errors"
	"sync/atomic"
)

// errStepBound is what the step context reports once the bound is hit.
var errStepBound = errors.New("search step bound reached")

// stepContext implements Options.MaxSteps on top of the upstream allocator,
// which has no step bound of its own but checks ctx.Err() once per search
// step (each allocateOne invocation). Counting those checks bounds the search
// deterministically, independent of machine speed. With no bound it only
// forwards to the parent.
//
// It departs from the context.Context contract in one way: Err can become
// non-nil while Done stays open. The upstream allocator only polls Err, and
// Allocate converts the outcome to allocator.ErrSearchBound itself.
type stepContext struct {
	context.Context
	max   int64
	steps atomic.Int64
	hit   atomic.Bool
}

func newStepContext(parent context.Context, max int64) *stepContext {
	return &stepContext{Context: parent, max: max}
}

// Err counts one step and reports errStepBound once max steps have been made.
func (c *stepContext) Err() error {
	if err := c.Context.Err(); err != nil {
		return err
	}
	if c.max <= 0 {
		return nil
	}
	if c.steps.Add(1) > c.max {
		c.hit.Store(true)
		return errStepBound
	}
	return nil
}

// exceeded reports whether the bound stopped the search.
func (c *stepContext) exceeded() bool { return c.hit.Load() }
