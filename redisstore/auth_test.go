package redisstore

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/extauthz/extauthz/internal/testkit/redistest"
)

func TestPassword(t *testing.T) {
	srv := redistest.Start(t, "--requirepass", "s3cret")
	tests := []struct {
		name     string
		password string
		wantErr  bool
	}{
		{"right password", "s3cret", false},
		{"wrong password", "nope", true},
		{"no password", "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := New(Config{Addrs: []string{srv.Addr()}, Password: tt.password, Timeout: time.Second})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			err = evalErr(s)
			if (err != nil) != tt.wantErr {
				t.Fatalf("Eval: got %v, want error %v", err, tt.wantErr)
			}
			if got := s.Stats().LastError; (got != nil) != tt.wantErr {
				t.Errorf("Stats.LastError: got %v, want error %v", got, tt.wantErr)
			}
			if err := s.Ping(context.Background()); (err != nil) != tt.wantErr {
				t.Errorf("Ping: got %v, want error %v", err, tt.wantErr)
			}
		})
	}
}

func TestZeroStore(t *testing.T) {
	var s Store
	if err := evalErr(&s); !errors.Is(err, ErrUnavailable) {
		t.Errorf("Eval on the zero Store: got %v, want ErrUnavailable", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := s.Run(ctx); err != nil {
		t.Errorf("Run on the zero Store: got %v, want nil", err)
	}
	s.Close()
}
