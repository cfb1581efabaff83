package httpserver

// pageHTML is the status page's template (html/template: every value is
// escaped for where it stands). Element ids name what a test, or a
// person with a scraper, looks for.
const pageHTML = `<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="refresh" content="{{.Refresh}}">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>outboxrelay {{if .Ready}}ready{{else}}NOT READY{{end}}</title>
<style>
body{font:14px/1.4 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0;background:#f4f5f7;color:#1d2330}
header{display:flex;flex-wrap:wrap;align-items:baseline;gap:.6em 1.2em;padding:12px 20px;background:#1d2330;color:#fff}
header h1{font-size:18px;margin:0}
header .meta{color:#b8c0cc}
.badge{font-weight:600;padding:2px 10px;border-radius:10px}
.ok{background:#2e8540;color:#fff}.fail{background:#c62828;color:#fff}
main{display:grid;grid-template-columns:repeat(auto-fit,minmax(340px,1fr));gap:14px;padding:14px 20px}
section{background:#fff;border-radius:6px;padding:10px 14px;box-shadow:0 1px 2px rgba(0,0,0,.08)}
section.wide{grid-column:1/-1}
h2{font-size:13px;text-transform:uppercase;letter-spacing:.05em;color:#5a6270;margin:0 0 6px}
dl{display:grid;grid-template-columns:max-content 1fr;gap:2px 12px;margin:0}
dt{color:#5a6270}dd{margin:0;overflow-wrap:anywhere}
.big{font-size:22px;font-weight:600}
table{border-collapse:collapse;width:100%}
th,td{text-align:left;padding:3px 8px 3px 0;vertical-align:top;border-bottom:1px solid #eceef1}
th{color:#5a6270;font-weight:500}
td.reason{overflow-wrap:anywhere}
li.bad{color:#c62828}
ul{margin:0;padding-left:18px}
svg{width:100%;height:90px;display:block;background:#fafbfc;border:1px solid #eceef1}
.note{color:#5a6270;font-size:12px}
code{font-size:13px}
footer{padding:4px 20px 16px;color:#5a6270;font-size:12px}
footer a{color:#1f6fb2}
</style>
</head>
<body>
<header>
<h1>outboxrelay</h1>
<span id="ready" class="badge {{if .Ready}}ok">ready{{else}}fail">not ready{{end}}</span>
<span class="meta">version <span id="version">{{.Version}}</span> · source <span id="source">{{.Source}}</span>
 · up since {{when .StartedAt}} · as of {{when .Time}}, every {{.Refresh}}s</span>
</header>
<main>
<section>
<h2>Readiness</h2>
<ul id="readiness">
{{range .Readiness}}<li{{if not .OK}} class="bad"{{end}}><b>{{.Name}}</b>: {{if .OK}}ok{{else}}FAIL{{end}}{{with .Message}} ({{.}}){{end}}</li>
{{end}}</ul>
</section>
<section>
<h2>Source</h2>
<dl>
<dt>source</dt><dd>{{.Source}}: {{if .SourceUp}}connected{{else if .Standby}}standby, waiting for the slot{{else}}not connected{{end}}</dd>
<dt>tables</dt><dd id="tables">{{range $i, $t := .Tables}}{{if $i}}, {{end}}{{$t}}{{end}}</dd>
<dt>postgres</dt><dd id="postgres"><code>{{.Postgres}}</code></dd>
<dt>kafka</dt><dd>{{range $i, $b := .Brokers}}{{if $i}}, {{end}}{{$b}}{{end}}</dd>
</dl>
</section>
{{with .Slot}}<section id="slot">
<h2>Replication slot</h2>
<dl>
<dt>slot</dt><dd id="slot-name">{{.Name}}</dd>
{{if .Error}}<dt>postgres</dt><dd class="bad">{{.Error}}</dd>
{{else if not .Exists}}<dt>state</dt><dd>does not exist (yet)</dd>
{{else}}<dt>state</dt><dd id="slot-state">{{if .Active}}active{{else}}not streamed from{{end}}{{with .ActivePID}}, held by PID {{.}}{{end}}</dd>
<dt>wal_status</dt><dd id="wal-status">{{.WALStatus}}</dd>
<dt>WAL it may still keep</dt><dd id="headroom">{{$.Headroom}}</dd>
<dt>confirmed_flush_lsn</dt><dd>{{.ConfirmedFlushLSN}}{{with .RelayConfirmedLSN}} (relay: {{.}}){{end}}</dd>
<dt>failover slot</dt><dd>{{with .Failover}}{{yesno .}}{{else}}none before PostgreSQL 17{{end}}{{with .Synced}}, synced: {{yesno .}}{{end}}</dd>
{{end}}</dl>
</section>
{{end}}{{with .Poll}}<section id="poll">
<h2>Poller claims</h2>
<dl>
<dt>mode</dt><dd>{{.Mode}}, every {{.Interval}}, {{.Buckets}} bucket(s)</dd>
{{range .Tables}}<dt>{{.Name}}</dt><dd>{{.Unpublished}} row(s) unpublished{{with .OldestUnpublished}}, the oldest {{when .}}{{end}}</dd>
{{end}}{{with .Error}}<dt>backlog</dt><dd class="bad">{{.}}</dd>{{end}}
</dl>
</section>
{{end}}<section>
<h2>Lag</h2>
<dl>
<dt>behind, in time</dt><dd class="big" id="lag-time">{{seconds .Lag.Seconds}}</dd>
{{if .Slot}}<dt>behind, in WAL</dt><dd id="lag-bytes">{{bytes .Lag.Bytes}}</dd>
{{end}}<dt>oldest unpublished</dt><dd>{{with .Lag.OldestUnpublished}}{{when .}}{{else}}none{{end}}</dd>
<dt>in flight</dt><dd id="in-flight">{{.EventsInFlight}}</dd>
</dl>
</section>
<section>
<h2>Last events</h2>
<dl>
<dt>committed</dt><dd id="last-committed">{{with .LastCommitted}}{{.ID}} → {{.Topic}}<br><span class="note">committed {{when .Timestamp}}, read {{ago $.Time .At}}</span>{{else}}none yet{{end}}</dd>
<dt>published</dt><dd id="last-published">{{with .LastPublished}}{{.ID}} → {{.Topic}}<br><span class="note">committed {{when .Timestamp}}, in Kafka {{ago $.Time .At}}</span>{{else}}none yet{{end}}</dd>
</dl>
</section>
<section>
<h2>Restarts and errors</h2>
<dl>
<dt>restarts</dt><dd id="restarts">{{.Restarts}}</dd>
<dt>last error</dt><dd id="last-error">{{with .LastError}}{{.Message}}<br><span class="note">{{when .At}}</span>{{else}}none{{end}}</dd>
</dl>
</section>
<section class="wide">
<h2>Events per second</h2>
<p><span class="big" id="rate">{{rate .Rate.EventsPerSecond}}</span>/s now ·
<span id="acknowledged">{{.EventsAcknowledged}}</span> acknowledged by Kafka since the start</p>
{{.Chart}}
<p class="note" id="chart-note">{{.ChartNote}}</p>
</section>
<section class="wide" id="dead-letters">
<h2>Dead letters</h2>
<p><span id="dead-letter-total">{{.DeadLetters.Total}}</span> sent to {{with .DeadLetters.Topic}}<code>{{.}}</code>{{else}}no dead letter topic (kafka.dead_letter_topic is not set){{end}} since the start{{if .DeadLetters.Recent}}; the last ones:{{end}}</p>
{{if .DeadLetters.Recent}}<table>
<tr><th>when</th><th>event id</th><th>topic</th><th>reason</th></tr>
{{range $d := .DeadLetters.Recent}}<tr><td>{{when $d.At}}</td><td>{{$d.ID}}</td><td>{{$d.Topic}}</td><td class="reason">{{$d.Reason}}{{with $.DeadLetters.Command}}<br><code class="note">{{.}} redrive --id {{$d.ID}}</code>{{end}}</td></tr>
{{end}}</table>{{end}}
{{with .DeadLetters.Command}}<p class="note" id="dead-letter-commands">Every one, with its record: <code>{{.}} list</code>; once the routing is fixed, send them on: <code>{{.}} redrive</code> (docs/replay.md#dead-letters).</p>{{end}}
</section>
</main>
<footer>Read only: nothing here changes the relay. The same as JSON: <a href="status">/status</a> ·
<a href="metrics">/metrics</a> · <a href="readyz">/readyz</a> · <a href="healthz">/healthz</a> · docs/status.md</footer>
</body>
</html>
`
