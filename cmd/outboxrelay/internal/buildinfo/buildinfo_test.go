package buildinfo

import (
	"runtime"
	"runtime/debug"
	"testing"
)

func TestFromBuildInfo(t *testing.T) {
	vcs := []debug.BuildSetting{
		{Key: "-trimpath", Value: "true"},
		{Key: "vcs", Value: "git"},
		{Key: "vcs.revision", Value: "b3d9dfd0c0ffee"},
		{Key: "vcs.time", Value: "2026-11-24T06:13:13Z"},
		{Key: "vcs.modified", Value: "true"},
	}
	platform := runtime.GOOS + "/" + runtime.GOARCH
	for _, tc := range []struct {
		name     string
		bi       *debug.BuildInfo
		ok       bool
		override string
		want     Info
		wantText string
	}{
		{
			name: "no build info",
			want: Info{Version: DevVersion, GoVersion: runtime.Version(), Platform: platform},
			wantText: "outboxrelay dev\nrevision: unknown (built without version control information)\n" +
				"time:     unknown\ngo:       " + runtime.Version() + " " + platform + "\n",
		},
		{
			name:     "no build info, version set at link time",
			override: "v1.4.0",
			want:     Info{Version: "v1.4.0", GoVersion: runtime.Version(), Platform: platform},
		},
		{
			name: "go run: (devel), no VCS",
			bi:   &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: "m", Version: "(devel)"}},
			ok:   true,
			want: Info{Version: DevVersion, GoVersion: "go1.26.8", Platform: platform},
		},
		{
			name: "go build in a modified checkout",
			bi:   &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: "m", Version: "v0.0.0-20261124061313-b3d9dfd0c0ff+dirty"}, Settings: vcs},
			ok:   true,
			want: Info{
				Version: "v0.0.0-20261124061313-b3d9dfd0c0ff+dirty", Revision: "b3d9dfd0c0ffee", Time: "2026-11-24T06:13:13Z",
				Modified: true, GoVersion: "go1.26.8", Platform: platform,
			},
			wantText: "outboxrelay v0.0.0-20261124061313-b3d9dfd0c0ff+dirty\nrevision: b3d9dfd0c0ffee (modified)\n" +
				"time:     2026-11-24T06:13:13Z\ngo:       go1.26.8 " + platform + "\n",
		},
		{
			// The image build stamps its release; the commit still shows.
			name:     "version set at link time wins over the module's",
			bi:       &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: "m", Version: "v0.0.0-20261124061313-b3d9dfd0c0ff"}, Settings: vcs[:4]},
			ok:       true,
			override: "v1.4.0",
			want:     Info{Version: "v1.4.0", Revision: "b3d9dfd0c0ffee", Time: "2026-11-24T06:13:13Z", GoVersion: "go1.26.8", Platform: platform},
			wantText: "outboxrelay v1.4.0\nrevision: b3d9dfd0c0ffee\ntime:     2026-11-24T06:13:13Z\ngo:       go1.26.8 " + platform + "\n",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := fromBuildInfo(tc.bi, tc.ok, tc.override)
			if got != tc.want {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
			if tc.wantText != "" && got.String() != tc.wantText {
				t.Errorf("String() =\n%s\nwant\n%s", got.String(), tc.wantText)
			}
		})
	}
}
