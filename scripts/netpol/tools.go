//go:build tools

// Package tools names the program scripts/ensure-netpol builds, kube-router,
// so that go.mod and go.sum hold every module it needs.
package tools

import (
	_ "github.com/cloudnativelabs/kube-router/v2/cmd/kube-router"
)
