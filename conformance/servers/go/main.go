// The conformance matrix's server on the Go SDK (github.com/modelcontextprotocol/go-sdk): the same
// five tools as every server of the matrix, each execution counted, the counts read at /count.
//
//	conformance-go -mode sse|json|stateless|resumable
//
// It listens on 127.0.0.1 (a free port) and prints "READY <port>" once it accepts connections.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"strings"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

type counts struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *counts) ran(tool string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n[tool]++
}

type searchIn struct {
	Query string `json:"query"`
}

type chargeIn struct {
	Amount int `json:"amount"`
}

type bulkIn struct {
	Size int `json:"size"`
}

type none struct{}

func text(s string) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: s}}}
}

func newServer(c *counts) *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "conformance-go", Version: "1"}, nil)
	mcp.AddTool(s, &mcp.Tool{Name: "search", Description: "read-only search"},
		func(_ context.Context, _ *mcp.CallToolRequest, in searchIn) (*mcp.CallToolResult, any, error) {
			c.ran("search")
			return text("found " + in.Query), nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "charge", Description: "charges once per call"},
		func(_ context.Context, _ *mcp.CallToolRequest, in chargeIn) (*mcp.CallToolResult, any, error) {
			c.ran("charge")
			return text(fmt.Sprintf("charged %d", in.Amount)), nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "fail", Description: "a tool error (isError)"},
		func(_ context.Context, _ *mcp.CallToolRequest, _ none) (*mcp.CallToolResult, any, error) {
			c.ran("fail")
			r := text("the tool failed")
			r.IsError = true
			return r, nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "reject", Description: "a JSON-RPC error"},
		func(_ context.Context, _ *mcp.CallToolRequest, _ none) (*mcp.CallToolResult, any, error) {
			c.ran("reject")
			return nil, nil, &jsonrpc.Error{Code: -32602, Message: "rejected by the server"}
		})
	mcp.AddTool(s, &mcp.Tool{Name: "bulk", Description: "an answer of the given size"},
		func(_ context.Context, _ *mcp.CallToolRequest, in bulkIn) (*mcp.CallToolResult, any, error) {
			c.ran("bulk")
			return text(strings.Repeat("x", in.Size)), nil, nil
		})
	return s
}

func main() {
	mode := flag.String("mode", "sse", "sse | json | stateless | resumable")
	flag.Parse()
	c := &counts{n: map[string]int{}}
	server := newServer(c)
	opts := &mcp.StreamableHTTPOptions{}
	switch *mode {
	case "sse":
	case "json":
		opts.JSONResponse = true
	case "stateless":
		opts.Stateless = true
	case "resumable":
		opts.EventStore = mcp.NewMemoryEventStore(nil)
	default:
		log.Fatalf("unknown mode %q", *mode)
	}
	mux := http.NewServeMux()
	mux.Handle("/mcp", mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server }, opts))
	mux.HandleFunc("/count", func(w http.ResponseWriter, _ *http.Request) {
		c.mu.Lock()
		defer c.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(c.n)
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("READY %d\n", ln.Addr().(*net.TCPAddr).Port)
	log.Fatal(http.Serve(ln, mux))
}
