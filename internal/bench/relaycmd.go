package bench

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime/pprof"

	"github.com/outboxrelay/outboxrelay/internal/app"
	"github.com/outboxrelay/outboxrelay/internal/config"
)

// RelayMain is `outboxbench relay --config FILE`: the relay exactly as
// `outboxrelay run` runs it (config.Load, then app.Run until ctx ends), with
// a CPU profile of the whole run and an allocation profile written at the
// end. The benchmark runs it as a child process instead of the outboxrelay
// binary when asked for profiles.
func RelayMain(ctx context.Context, args []string, stderr io.Writer) (err error) {
	fs := flag.NewFlagSet("relay", flag.ContinueOnError)
	fs.SetOutput(stderr)
	path := fs.String("config", "", "configuration file (YAML)")
	cpuPath := fs.String("cpuprofile", "", "write a CPU profile of the run to this file")
	memPath := fs.String("memprofile", "", "write an allocation profile to this file at the end")
	if err := fs.Parse(args); err != nil {
		return err
	}
	cfg, err := config.Load(*path, os.Environ())
	if err != nil {
		return err
	}
	if *cpuPath != "" {
		f, err := os.Create(*cpuPath)
		if err != nil {
			return err
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			f.Close()
			return fmt.Errorf("start the CPU profile: %w", err)
		}
		defer func() {
			pprof.StopCPUProfile()
			err = errors.Join(err, f.Close())
		}()
	}
	app.TuneRuntime(cfg) // as outboxrelay run does
	if err := app.Run(ctx, cfg, app.NewLogger(stderr, cfg.Log.Level, cfg.Log.Format)); err != nil {
		return err
	}
	if *memPath != "" {
		f, err := os.Create(*memPath)
		if err != nil {
			return err
		}
		err = pprof.Lookup("allocs").WriteTo(f, 0)
		return errors.Join(err, f.Close())
	}
	return nil
}
