//go:build tools

// Package tools names the program scripts/ensure-kaniko builds, kaniko's
// executor, so that go.mod and go.sum hold every module it needs.
package tools

import (
	_ "github.com/chainguard-dev/kaniko/cmd/executor"
)
