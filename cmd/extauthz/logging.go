package main

import (
	"fmt"
	"io"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/extauthz/extauthz/internal/config"
)

// newLogger builds the service logger, writing to w in cfg's format at cfg's level.
func newLogger(cfg config.LogConfig, w io.Writer) (*zap.Logger, error) {
	level, err := zapcore.ParseLevel(cfg.Level)
	if err != nil {
		return nil, fmt.Errorf("log.level: %w", err)
	}
	var enc zapcore.Encoder
	switch cfg.Format {
	case "json":
		ec := zap.NewProductionEncoderConfig()
		ec.EncodeTime = zapcore.RFC3339NanoTimeEncoder
		ec.EncodeDuration = zapcore.StringDurationEncoder
		enc = zapcore.NewJSONEncoder(ec)
	case "console":
		ec := zap.NewDevelopmentEncoderConfig()
		ec.EncodeDuration = zapcore.StringDurationEncoder
		enc = zapcore.NewConsoleEncoder(ec)
	default:
		return nil, fmt.Errorf("log.format: must be json or console, not %q", cfg.Format)
	}
	core := zapcore.NewCore(enc, zapcore.Lock(zapcore.AddSync(w)), level)
	return zap.New(core, zap.ErrorOutput(zapcore.Lock(zapcore.AddSync(w)))), nil
}

// Sampling of the request-path logger: per message and second, the first sampleFirst entries,
// then every sampleThereafter-th.
const (
	sampleTick       = time.Second
	sampleFirst      = 10
	sampleThereafter = 100
)

// sampled wraps log so that a flood of one message (blocks, bad requests) cannot drown the
// log; dropped is called for every entry left out.
func sampled(log *zap.Logger, dropped func()) *zap.Logger {
	return log.WithOptions(zap.WrapCore(func(core zapcore.Core) zapcore.Core {
		return zapcore.NewSamplerWithOptions(core, sampleTick, sampleFirst, sampleThereafter,
			zapcore.SamplerHook(func(_ zapcore.Entry, dec zapcore.SamplingDecision) {
				if dec&zapcore.LogDropped != 0 && dropped != nil {
					dropped()
				}
			}))
	}))
}
