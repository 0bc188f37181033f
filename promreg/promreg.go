// Package promreg registers TaskFlow's Prometheus collectors so that several
// users of one registry (two handlers, or a limiter per test, in one process)
// share them instead of failing.
package promreg

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// Register registers c in reg and returns it, or returns the equal collector
// registered there before. Any other registration error is a programming error
// (two different collectors under one name) and panics.
func Register[C prometheus.Collector](reg prometheus.Registerer, c C) C {
	if err := reg.Register(c); err != nil {
		var dup prometheus.AlreadyRegisteredError
		if errors.As(err, &dup) {
			if existing, ok := dup.ExistingCollector.(C); ok {
				return existing
			}
		}
		panic(err)
	}
	return c
}
