// Package handler is an example sless function (runtime go1.23, entrypoint
// handler.Handle).
package handler

import (
	"context"
	"fmt"
)

// Event is the request, as every sless runtime passes it. Declare only the
// fields you use; any type the event decodes into as JSON will do.
type Event struct {
	Method  string            `json:"method"`
	Path    string            `json:"path"`
	Query   map[string]string `json:"query"`
	Headers map[string]string `json:"headers"`
	Body    string            `json:"body"`
	JSON    any               `json:"json"`
}

// Handle greets the `name` query parameter, else the `name` field of a JSON
// body, else the world.
func Handle(ctx context.Context, event Event) (any, error) {
	name := event.Query["name"]
	if name == "" {
		if body, ok := event.JSON.(map[string]any); ok {
			name, _ = body["name"].(string)
		}
	}
	if name == "" {
		name = "world"
	}
	return map[string]any{
		"message": fmt.Sprintf("hello, %s", name),
		"method":  event.Method,
		"path":    event.Path,
	}, nil
}
