package compose

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"time"
)

// echoEnv makes the test binary the compose stack's echo service instead of running tests.
const echoEnv = "EXTAUTHZ_COMPOSE_ECHO"

// serveEcho is what the stack's echo image does for its checks: on $HTTP_PORT, answer 200
// with the request as JSON, after the delay an x-set-response-delay-ms header asks for.
func serveEcho() int {
	port := os.Getenv("HTTP_PORT")
	if port == "" {
		port = "8080"
	}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if ms, err := strconv.Atoi(r.Header.Get("x-set-response-delay-ms")); err == nil && ms > 0 {
			select {
			case <-time.After(time.Duration(ms) * time.Millisecond):
			case <-r.Context().Done():
				return
			}
		}
		w.Header().Set("content-type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"path": r.URL.Path, "method": r.Method, "headers": r.Header})
	})
	srv := &http.Server{Addr: ":" + port, Handler: h, ReadHeaderTimeout: 10 * time.Second}
	if err := srv.ListenAndServe(); err != nil {
		fmt.Fprintln(os.Stderr, "echo:", err)
		return 1
	}
	return 0
}
