//! The forecast drawn: an SVG (one row per pool, time across) and a self-contained HTML page
//! around it. Hand-written markup, deterministic: the same forecast gives the same bytes.
//!
//! Days and hours are marked in [`Forecast::time_zone`], and every time written in the picture
//! and the page carries its UTC offset. Drawn 900 px wide, so that it reads 1:1 on a typical
//! page: each rotation is a bar at least [`MIN_BAR_W`] wide, and bars that would touch as drawn
//! go to separate lanes (stacked when several are in flight); stretches where a reason's budgets
//! allow no node are shaded per reason (both reasons at once: a shading of its own), waits on a
//! gate (paused, halted, stopped, a node group waiting for a window) are a hatched band at the
//! top of the row named after its gate (`paused by alice ...: CVE triage`), a wait for a
//! promotion a blue band there named after what it waits for (`waiting for prod/test soak until
//! Tue 01 Dec 14:10 UTC`), the change of the desired AMI is a dashed line and the moment a pool
//! is done a green mark in the row's bottom band, clear of the bars; a pool not done by the end
//! says why in that band ([`not_done_reason`]). Pool names too long for the label column wrap
//! onto more lines (the row grows), so no label runs into the chart. Every shading is in the
//! legend. Every element carries a `<title>` with its details (shown on hover).

use std::fmt::Write as _;

use chrono::{DateTime, Datelike, NaiveDate, NaiveTime, Offset, TimeZone, Utc};
use chrono_tz::Tz;

use super::{BlockKind, Forecast, PoolForecast, RotationSpan};
use crate::budget::Reason;
use crate::rotation::RotationReason;

const LABEL_W: f64 = 150.0;
/// Left margin of the labels.
const LABEL_X: f64 = 10.0;
/// Room kept between a label and the chart.
const LABEL_GAP: f64 = 8.0;
/// The widest a character of an 11 px bold label is taken to be (Helvetica's widest common
/// glyphs are about 0.61 em), so that a wrapped name never reaches the chart.
const CHAR_W_BOLD: f64 = 7.0;
/// The same for 11 px regular text.
const CHAR_W: f64 = 6.2;
/// The same for the 10 px text of band labels and reasons.
const CHAR_W_SMALL: f64 = 5.0;
/// Line height of the labels.
const LABEL_LINE_H: f64 = 13.0;
const PLOT_W: f64 = 730.0;
const RIGHT_PAD: f64 = 20.0;
const TOP: f64 = 80.0;
const LANE_H: f64 = 12.0;
const BAR_H: f64 = 9.0;
/// Height of the gate band at the top of a row (it carries its label), and of the done band at
/// its bottom (its mark, or the reason a pool is not done).
const GATE_BAND: f64 = 14.0;
const DONE_BAND: f64 = 15.0;
const ROW_MIN_H: f64 = 42.0;
/// The narrowest bar drawn (a 10-minute rotation in a week is under 1 px), and the gap kept
/// between bars of one lane.
pub const MIN_BAR_W: f64 = 4.0;
const BAR_GAP: f64 = 1.0;
const LEGEND_LINE_H: f64 = 18.0;

const STYLE: &str = "text{fill:#1a202c}.t{font-size:15px;font-weight:bold}.s{fill:#4a5568}\
.p{font-weight:bold}.nd{fill:#c53030}.day{stroke:#a0aec0}.hr{stroke:#e2e8f0}\
.rowa{fill:#ffffff}.rowb{fill:#f7fafc}.cd{fill:#ed8936;fill-opacity:.28}\
.ce{fill:#9f7aea;fill-opacity:.28}.cb{fill:#718096;fill-opacity:.30}.gate{fill:url(#hatch)}\
.Drifted{fill:#3182ce}.Expired{fill:#805ad5}.Unhealthy{fill:#dd6b20}.forced{fill:#c53030}.other{fill:#718096}\
.wave{fill:#2c5282}.ami{stroke:#2d3748;stroke-dasharray:4 3}.done{fill:#38a169}\
.doneline{stroke:#38a169;stroke-width:2}.rollback{fill:#dd6b20}.indicted{stroke:#c53030;stroke-width:2}.ind{fill:#c53030}.promo{fill:#90cdf4;fill-opacity:.55}.gl{font-size:10px;paint-order:stroke;stroke:#ffffff;stroke-width:3px;stroke-linejoin:round}.why{font-size:10px;fill:#c53030}";

/// The forecast as an SVG document.
pub fn svg(forecast: &Forecast) -> String {
    let layout = Layout::new(forecast);
    let mut s = String::new();
    let (w, h) = (layout.width(), layout.height());
    let _ = writeln!(
        s,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w:.0}\" height=\"{h:.0}\" \
         viewBox=\"0 0 {w:.0} {h:.0}\" font-family=\"Helvetica,Arial,sans-serif\" font-size=\"11\">"
    );
    let _ = writeln!(
        s,
        "<defs><pattern id=\"hatch\" width=\"6\" height=\"6\" patternUnits=\"userSpaceOnUse\" \
         patternTransform=\"rotate(45)\"><rect width=\"6\" height=\"6\" fill=\"#edf2f7\" \
         fill-opacity=\".6\"/><line x1=\"0\" y1=\"0\" x2=\"0\" y2=\"6\" stroke=\"#718096\" \
         stroke-width=\"1.5\"/></pattern></defs>"
    );
    let _ = writeln!(s, "<style>{STYLE}</style>");
    let _ = writeln!(
        s,
        "<rect width=\"{w:.0}\" height=\"{h:.0}\" fill=\"#ffffff\"/>"
    );
    let _ = writeln!(
        s,
        "<text class=\"t\" x=\"10\" y=\"20\">nodecycle simulate: {} pool(s), {} to {}</text>",
        forecast.pools.len(),
        esc(&layout.local(forecast.from)),
        esc(&layout.local(forecast.to)),
    );
    let _ = writeln!(
        s,
        "<text class=\"s\" x=\"10\" y=\"38\">days and hours in {}{}; one row per pool, one bar per rotation</text>",
        esc(&zone_name(layout.zone)),
        if layout.zone == Tz::UTC {
            ""
        } else {
            " (the zone of every budget window)"
        }
    );
    for (i, pool) in forecast.pools.iter().enumerate() {
        layout.row(&mut s, i, pool);
    }
    layout.axis(&mut s);
    layout.legend(&mut s);
    s.push_str("</svg>\n");
    s
}

/// A self-contained HTML page: the SVG, its legend, hover details and a table per pool.
pub fn html(forecast: &Forecast) -> String {
    let mut s = String::new();
    let zone = zone_name(forecast.time_zone);
    s.push_str(
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <title>nodecycle simulate</title>\n<style>\
         body{font-family:Helvetica,Arial,sans-serif;margin:16px;color:#1a202c}\
         #detail{min-height:1.4em;padding:6px 8px;background:#edf2f7;border-radius:4px}\
         table{border-collapse:collapse;margin-top:12px}td,th{border:1px solid #cbd5e0;\
         padding:3px 8px;text-align:left;vertical-align:top;font-size:13px}\
         .chart{overflow-x:auto}</style>\n</head>\n<body>\n",
    );
    let _ = writeln!(
        s,
        "<h1>nodecycle simulate</h1>\n<p>From {} to {}. The chart's days and hours and every time on this page are in {zone} (each with its UTC offset); the JSON of <code>nodecycle simulate</code> is in UTC. Hover a bar or a shaded stretch for its details.</p>",
        esc(&zoned(forecast.from, forecast.time_zone)),
        esc(&zoned(forecast.to, forecast.time_zone)),
        zone = esc(&zone)
    );
    s.push_str("<p id=\"detail\">&#160;</p>\n<div class=\"chart\" id=\"chart\">\n");
    s.push_str(&svg(forecast));
    s.push_str("</div>\n<table>\n<tr><th>pool</th><th>kind</th><th>nodes</th><th>done</th><th>rotations</th><th>max in flight</th><th>waits</th></tr>\n");
    let zone = forecast.time_zone;
    for p in &forecast.pools {
        let done = p
            .done
            .map_or_else(|| "not by the end".to_string(), |t| zoned(t, zone));
        let most = match (&p.max_in_flight_at, &p.max_in_flight_why) {
            (Some(at), Some(why)) => format!("{} ({}: {why})", p.max_in_flight, zoned(*at, zone)),
            _ => p.max_in_flight.to_string(),
        };
        let promotion = promotion_wait(p, forecast.to, zone).map(|(from, to, _, title)| {
            format!("{} to {}: {title}", zoned(from, zone), zoned(to, zone))
        });
        let indicted = p
            .indicted
            .as_ref()
            .map(|i| format!("{}: {} ({})", zoned(i.at, zone), i.label, i.why));
        let waits: Vec<String> = indicted
            .into_iter()
            .chain(promotion)
            .chain(p.blocked.iter().map(|b| {
                let gate = b
                    .gate
                    .as_ref()
                    .map(|g| format!(" ({g})"))
                    .unwrap_or_default();
                format!(
                    "{} to {}: {:?} waits{gate}: {}",
                    zoned(b.from, zone),
                    zoned(b.to, zone),
                    b.reason,
                    b.why
                )
            }))
            .collect();
        let _ = writeln!(
            s,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            esc(&p.pool),
            kind(p),
            p.nodes,
            esc(&done),
            p.rotations.len(),
            esc(&most),
            waits
                .iter()
                .map(|w| esc(w))
                .collect::<Vec<_>>()
                .join("<br>")
        );
    }
    s.push_str(
        "</table>\n<script>\n\
         const detail = document.getElementById('detail');\n\
         const chart = document.getElementById('chart');\n\
         chart.addEventListener('mouseover', (e) => {\n\
         \x20 for (let n = e.target; n && n !== chart; n = n.parentNode) {\n\
         \x20   const t = n.querySelector(':scope > title');\n\
         \x20   if (t) { detail.textContent = t.textContent; return; }\n\
         \x20 }\n\
         });\n</script>\n</body>\n</html>\n",
    );
    s
}

/// Local midnights, and hour ticks with their local hour.
type Ticks = (Vec<DateTime<Utc>>, Vec<(DateTime<Utc>, u32)>);

/// Geometry shared by the parts of the picture.
struct Layout {
    from: DateTime<Utc>,
    to: DateTime<Utc>,
    zone: Tz,
    /// Top and height of each row.
    rows: Vec<(f64, f64)>,
    /// Lane of each rotation, per pool.
    lanes: Vec<Vec<usize>>,
}

impl Layout {
    fn new(f: &Forecast) -> Layout {
        let mut layout = Layout {
            from: f.from,
            to: f.to,
            zone: f.time_zone,
            rows: Vec::new(),
            lanes: Vec::new(),
        };
        let mut y = TOP;
        for p in &f.pools {
            let l = assign_lanes(&p.rotations, |r| layout.bar_extent(r));
            let count = l.iter().max().map_or(1, |m| m + 1);
            let labels = label_lines(p, layout.zone).len() as f64;
            let h = (GATE_BAND + 3.0 + LANE_H * count as f64 + DONE_BAND)
                .max(ROW_MIN_H)
                .max(15.0 + LABEL_LINE_H * (labels - 1.0) + 8.0);
            layout.rows.push((y, h));
            layout.lanes.push(l);
            y += h;
        }
        layout
    }

    /// Where a rotation's bar is drawn: from its start, at least [`MIN_BAR_W`] wide.
    fn bar_extent(&self, r: &RotationSpan) -> (f64, f64) {
        let (x0, x1) = (self.x(r.start), self.x(r.end));
        (x0, x1.max(x0 + MIN_BAR_W))
    }

    fn plot_bottom(&self) -> f64 {
        self.rows.last().map_or(TOP, |(y, h)| y + h)
    }

    fn width(&self) -> f64 {
        LABEL_W + PLOT_W + RIGHT_PAD
    }

    fn height(&self) -> f64 {
        self.plot_bottom() + 16.0 + LEGEND_LINE_H * self.legend_lines().len() as f64
    }

    fn x(&self, t: DateTime<Utc>) -> f64 {
        let span = (self.to - self.from).num_seconds().max(1) as f64;
        let t = t.clamp(self.from, self.to);
        LABEL_W + PLOT_W * (t - self.from).num_seconds() as f64 / span
    }

    /// `Thu 03 Dec 16:30 UTC+08:00`: local time with its offset.
    fn local(&self, t: DateTime<Utc>) -> String {
        let local = t.with_timezone(&self.zone);
        format!("{} {}", local.format("%a %d %b %H:%M"), offset(local))
    }

    fn span(&self, a: DateTime<Utc>, b: DateTime<Utc>) -> String {
        format!("{} to {}", self.local(a), self.local(b))
    }

    /// Local midnights and hour ticks (every `step` hours) within the forecast.
    fn ticks(&self, step: u32) -> Ticks {
        let mut days = Vec::new();
        let mut hours = Vec::new();
        let first = self.from.with_timezone(&self.zone).date_naive();
        let last = self.to.with_timezone(&self.zone).date_naive();
        let mut d: NaiveDate = first;
        while d <= last {
            for h in (0..24).step_by(usize::try_from(step.max(1)).unwrap_or(24)) {
                let Some(naive) = NaiveTime::from_hms_opt(h, 0, 0).map(|t| d.and_time(t)) else {
                    continue;
                };
                let Some(t) = self.zone.from_local_datetime(&naive).earliest() else {
                    continue;
                };
                let t = t.with_timezone(&Utc);
                if t < self.from || t > self.to {
                    continue;
                }
                if h == 0 {
                    days.push(t);
                } else {
                    hours.push((t, h));
                }
            }
            let Some(next) = d.succ_opt() else { break };
            d = next;
        }
        (days, hours)
    }

    fn axis(&self, s: &mut String) {
        let px_per_hour = PLOT_W / ((self.to - self.from).num_minutes().max(1) as f64 / 60.0);
        let step = [1u32, 3, 6, 12]
            .into_iter()
            .find(|h| px_per_hour * f64::from(*h) >= 24.0)
            .unwrap_or(24);
        let (days, hours) = self.ticks(step);
        let (top, bottom) = (TOP - 4.0, self.plot_bottom());
        if step < 24 {
            for (t, h) in &hours {
                let x = self.x(*t);
                let _ = writeln!(
                    s,
                    "<line class=\"hr\" x1=\"{x:.1}\" y1=\"{top:.1}\" x2=\"{x:.1}\" y2=\"{bottom:.1}\"/>\
                     <text class=\"s\" x=\"{x:.1}\" y=\"{:.1}\" text-anchor=\"middle\" font-size=\"11\">{h:02}</text>",
                    TOP - 6.0
                );
            }
        }
        let px_per_day = px_per_hour * 24.0;
        for t in &days {
            let x = self.x(*t);
            if *t >= self.to {
                let _ = writeln!(
                    s,
                    "<line class=\"day\" x1=\"{x:.1}\" y1=\"{:.1}\" x2=\"{x:.1}\" y2=\"{bottom:.1}\"/>",
                    top - 14.0
                );
                continue;
            }
            let local = t.with_timezone(&self.zone);
            let label = if px_per_day >= 80.0 {
                local.format("%a %d %b").to_string()
            } else {
                format!("{}", local.day())
            };
            let _ = writeln!(
                s,
                "<line class=\"day\" x1=\"{x:.1}\" y1=\"{:.1}\" x2=\"{x:.1}\" y2=\"{bottom:.1}\"/>\
                 <text x=\"{:.1}\" y=\"{:.1}\">{}</text>",
                top - 14.0,
                x + 3.0,
                top - 16.0,
                esc(&label)
            );
        }
        let _ = writeln!(
            s,
            "<line class=\"day\" x1=\"{LABEL_W:.1}\" y1=\"{top:.1}\" x2=\"{:.1}\" y2=\"{top:.1}\"/>",
            LABEL_W + PLOT_W
        );
    }

    fn row(&self, s: &mut String, index: usize, pool: &PoolForecast) {
        let (y, h) = self.rows[index];
        let class = if index.is_multiple_of(2) {
            "rowa"
        } else {
            "rowb"
        };
        let _ = writeln!(
            s,
            "<rect class=\"{class}\" x=\"0\" y=\"{y:.1}\" width=\"{:.0}\" height=\"{h:.1}\"/>",
            self.width()
        );
        let names = wrap(&pool.pool, label_chars(CHAR_W_BOLD)).len();
        for (i, (class, line)) in label_lines(pool, self.zone).into_iter().enumerate() {
            let title = if i < names {
                format!("{} ({})", pool.pool, kind(pool))
            } else {
                format!("{}: {}", pool.pool, line)
            };
            let _ = writeln!(
                s,
                "<text class=\"{class}\" x=\"{LABEL_X:.0}\" y=\"{:.1}\">{}<title>{}</title></text>",
                y + 15.0 + LABEL_LINE_H * i as f64,
                esc(&line),
                esc(&title)
            );
        }
        for (class, from, to, what) in closed_pieces(pool) {
            self.stretch(
                s,
                (y, h),
                (from, to),
                class,
                &format!("{what}: {}", self.span(from, to)),
            );
        }
        if let Some((from, to, label, title)) = promotion_wait(pool, self.to, self.zone) {
            self.band(
                s,
                y,
                (from, to),
                "promo",
                &label,
                &format!("{title}; {}", self.span(from, to)),
            );
        }
        for b in pool.blocked.iter().filter(|b| b.kind == BlockKind::Gate) {
            let name = b.gate.as_deref().unwrap_or("gate");
            self.band(
                s,
                y,
                (b.from, b.to),
                "gate",
                name,
                &format!(
                    "{name}: {:?} waits, {}: {}",
                    b.reason,
                    self.span(b.from, b.to),
                    b.why
                ),
            );
        }
        if let Some(at) = pool
            .desired_change
            .filter(|t| *t >= self.from && *t <= self.to)
        {
            let x = self.x(at);
            let _ = writeln!(
                s,
                "<line class=\"ami\" x1=\"{x:.1}\" y1=\"{y:.1}\" x2=\"{x:.1}\" y2=\"{:.1}\">\
                 <title>the desired AMI changes: {}</title></line>",
                y + h,
                esc(&self.local(at))
            );
        }
        for (r, lane) in pool.rotations.iter().zip(&self.lanes[index]) {
            self.bar(s, y, *lane, r, pool);
        }
        if let Some(i) = &pool.indicted {
            self.indicted(s, (y, h), i);
        }
        if pool.done.is_none()
            && let Some((short, full)) = not_done_reason(pool, self.to, self.zone)
        {
            let text =
                fit(&format!("not done: {short}"), PLOT_W - 8.0, CHAR_W_SMALL).unwrap_or_default();
            let _ = writeln!(
                s,
                "<text class=\"why\" x=\"{:.1}\" y=\"{:.1}\">{}<title>not done by the end: {}</title></text>",
                LABEL_W + 4.0,
                y + h - 4.0,
                esc(&text),
                esc(&full)
            );
        }
        if let Some(d) = pool.done {
            let x = self.x(d);
            let _ = writeln!(
                s,
                "<g><line class=\"doneline\" x1=\"{x:.1}\" y1=\"{:.1}\" x2=\"{x:.1}\" y2=\"{:.1}\"/>\
                 <path class=\"done\" d=\"M{x:.1} {:.1}l5 6l-5 6l-5 -6z\"/>\
                 <title>done: every node runs the desired AMI from {}</title></g>",
                y + h - DONE_BAND,
                y + h - 1.0,
                y + h - DONE_BAND + 1.0,
                esc(&self.local(d))
            );
        }
    }

    /// The indictment: a red line at its minute over the row, its label in the band at the top
    /// (to the right of the line, or to its left when there is more room there), the evidence
    /// in its title.
    fn indicted(&self, s: &mut String, (y, h): (f64, f64), i: &super::Indicted) {
        let x = self.x(i.at);
        let right = LABEL_W + PLOT_W - x - 4.0;
        let left = x - LABEL_W - 4.0;
        let (anchor, tx, room) = if right >= left {
            ("start", x + 3.0, right)
        } else {
            ("end", x - 3.0, left)
        };
        let text = fit(&i.label, room, CHAR_W_SMALL)
            .map(|t| {
                format!(
                    "<text class=\"gl ind\" x=\"{tx:.1}\" y=\"{:.1}\" text-anchor=\"{anchor}\">{}</text>",
                    y + GATE_BAND - 3.0,
                    esc(&t)
                )
            })
            .unwrap_or_default();
        let _ = writeln!(
            s,
            "<g><line class=\"indicted\" x1=\"{x:.1}\" y1=\"{y:.1}\" x2=\"{x:.1}\" y2=\"{:.1}\"/>{text}<title>{} at {}: {}</title></g>",
            y + h,
            esc(&i.label),
            esc(&self.local(i.at)),
            esc(&i.why)
        );
    }

    /// A shaded stretch over a whole row.
    fn stretch(
        &self,
        s: &mut String,
        (y, h): (f64, f64),
        (from, to): (DateTime<Utc>, DateTime<Utc>),
        class: &str,
        title: &str,
    ) {
        let (x0, x1) = (self.x(from), self.x(to));
        if x1 <= x0 {
            return;
        }
        let _ = writeln!(
            s,
            "<rect class=\"{class}\" x=\"{x0:.1}\" y=\"{y:.1}\" width=\"{:.1}\" height=\"{h:.1}\"><title>{}</title></rect>",
            x1 - x0,
            esc(title)
        );
    }

    /// A band at the top of the row (a gate, a promotion wait) over `from..to`, its `label`
    /// written in it as far as it fits.
    fn band(
        &self,
        s: &mut String,
        y: f64,
        (from, to): (DateTime<Utc>, DateTime<Utc>),
        class: &str,
        label: &str,
        title: &str,
    ) {
        let (x0, x1) = (self.x(from), self.x(to));
        if x1 <= x0 {
            return;
        }
        let text = fit(label, x1 - x0 - 6.0, CHAR_W_SMALL)
            .map(|t| {
                format!(
                    "<text class=\"gl\" x=\"{:.1}\" y=\"{:.1}\">{}</text>",
                    x0 + 3.0,
                    y + GATE_BAND - 3.0,
                    esc(&t)
                )
            })
            .unwrap_or_default();
        let _ = writeln!(
            s,
            "<g><rect class=\"{class}\" x=\"{x0:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"{:.1}\"/>{text}<title>{}</title></g>",
            y + 1.0,
            x1 - x0,
            GATE_BAND - 1.0,
            esc(title)
        );
    }

    fn bar(&self, s: &mut String, y: f64, lane: usize, r: &RotationSpan, pool: &PoolForecast) {
        let (x0, x1) = self.bar_extent(r);
        let width = x1 - x0;
        let top = y + GATE_BAND + 3.0 + LANE_H * lane as f64;
        let back = rollback_to(pool, r);
        let class = match r.reason {
            _ if r.forced => "forced",
            _ if back.is_some() => "rollback",
            _ if r.wave => "wave",
            RotationReason::Drifted => "Drifted",
            RotationReason::Expired => "Expired",
            RotationReason::Unhealthy => "Unhealthy",
            RotationReason::Interrupted | RotationReason::Maintenance | RotationReason::Manual => {
                "other"
            }
        };
        let how = if r.wave {
            ", node group update wave".to_string()
        } else if r.forced {
            ", forced".to_string()
        } else {
            String::new()
        };
        let how = match back {
            Some(ami) => format!("{how}, rollback to {ami}"),
            None => how,
        };
        let _ = writeln!(
            s,
            "<rect class=\"{class}\" x=\"{x0:.1}\" y=\"{top:.1}\" width=\"{width:.1}\" height=\"{BAR_H:.1}\" rx=\"1.5\">\
             <title>{}: {:?}{how}, {}</title></rect>",
            esc(&r.instance),
            r.reason,
            esc(&self.span(r.start, r.end))
        );
    }

    /// The legend's entries laid out in lines: `(class, label, x)` per line; class `ami` is
    /// the dashed line.
    fn legend_lines(&self) -> Vec<Vec<(&'static str, &'static str, f64)>> {
        let mut lines = vec![Vec::new()];
        let mut x = 10.0;
        for (class, label) in LEGEND {
            let width = 24.0 + 6.0 * label.len() as f64;
            if x + width > self.width() - 10.0 {
                x = 10.0;
                lines.push(Vec::new());
            }
            if let Some(line) = lines.last_mut() {
                line.push((class, label, x));
            }
            x += width;
        }
        lines
    }

    fn legend(&self, s: &mut String) {
        let top = self.plot_bottom() + 22.0;
        for (i, line) in self.legend_lines().into_iter().enumerate() {
            let y = top + LEGEND_LINE_H * i as f64;
            for (class, label, x) in line {
                if class == "ami" {
                    let _ = writeln!(
                        s,
                        "<line class=\"ami\" x1=\"{:.1}\" y1=\"{:.1}\" x2=\"{:.1}\" y2=\"{:.1}\"/>",
                        x + 7.0,
                        y - 11.0,
                        x + 7.0,
                        y + 2.0
                    );
                } else if class == "indicted" {
                    let _ = writeln!(
                        s,
                        "<line class=\"indicted\" x1=\"{:.1}\" y1=\"{:.1}\" x2=\"{:.1}\" y2=\"{:.1}\"/>",
                        x + 7.0,
                        y - 11.0,
                        x + 7.0,
                        y + 2.0
                    );
                } else if class == "done" {
                    let _ = writeln!(
                        s,
                        "<path class=\"done\" d=\"M{:.1} {:.1}l5 6l-5 6l-5 -6z\"/>",
                        x + 7.0,
                        y - 10.0
                    );
                } else {
                    let _ = writeln!(
                        s,
                        "<rect class=\"{class}\" x=\"{x:.1}\" y=\"{:.1}\" width=\"14\" height=\"10\"/>",
                        y - 9.0
                    );
                }
                let _ = writeln!(s, "<text x=\"{:.1}\" y=\"{y:.1}\">{label}</text>", x + 18.0);
            }
        }
    }
}

/// Every mark and shading the picture draws, with its legend label (the legend shows all).
pub const LEGEND: [(&str, &str); 14] = [
    ("Drifted", "Drifted rotation"),
    ("Expired", "Expired rotation"),
    ("forced", "forced (no budget wait)"),
    ("wave", "node group update wave"),
    ("other", "Manual / Maintenance / Interrupted"),
    ("cd", "Drifted budget closed"),
    ("ce", "Expired budget closed"),
    ("cb", "both budgets closed"),
    ("gate", "waiting on a gate or a window fit (band, named)"),
    ("promo", "waiting for a promotion (band, named)"),
    ("ami", "desired AMI changes"),
    ("done", "done: every node on the desired AMI"),
    ("rollback", "rollback rotation (off an indicted AMI)"),
    ("indicted", "release indicted (line, named)"),
];

/// The AMI a rotation of `pool` rolls back to: a budgeted `Drifted` one started from the
/// pool's rollback on.
fn rollback_to<'a>(pool: &'a PoolForecast, r: &RotationSpan) -> Option<&'a str> {
    let i = pool.indicted.as_ref()?;
    (r.reason == RotationReason::Drifted && !r.forced && r.start >= i.at)
        .then_some(i.rolled_back_to.as_deref())
        .flatten()
}

/// `self-managed node group` or `managed node group`.
fn kind(pool: &PoolForecast) -> &'static str {
    if pool.managed {
        "managed node group"
    } else {
        "self-managed node group"
    }
}

/// `UTC` or `UTC+08:00`.
fn offset(local: DateTime<Tz>) -> String {
    let secs = local.offset().fix().local_minus_utc();
    if secs == 0 {
        "UTC".to_string()
    } else {
        format!("UTC{}", local.format("%:z"))
    }
}

/// `2026-12-05 00:30 UTC+08:00`: an instant in `zone`, with its offset.
fn zoned(t: DateTime<Utc>, zone: Tz) -> String {
    let local = t.with_timezone(&zone);
    format!("{} {}", local.format("%Y-%m-%d %H:%M"), offset(local))
}

/// The closed stretches of a pool cut where the reasons overlap: `(class, from, to, title)`,
/// Drifted only (`cd`), Expired only (`ce`), both (`cb`), so no two shadings ever overlap.
fn closed_pieces(pool: &PoolForecast) -> Vec<(&'static str, DateTime<Utc>, DateTime<Utc>, String)> {
    let mut edges: Vec<DateTime<Utc>> = pool.closed.iter().flat_map(|c| [c.from, c.to]).collect();
    edges.sort();
    edges.dedup();
    let closed_at = |reason: Reason, t: DateTime<Utc>| {
        pool.closed
            .iter()
            .find(|c| c.reason == reason && c.from <= t && t < c.to)
    };
    let name = |c: &super::Closed| {
        c.budget
            .map(|i| format!(" (disruption.budgets[{i}])"))
            .unwrap_or_default()
    };
    let mut out: Vec<(&'static str, DateTime<Utc>, DateTime<Utc>, String)> = Vec::new();
    for pair in edges.windows(2) {
        let (a, b) = (pair[0], pair[1]);
        let piece = match (closed_at(Reason::Drifted, a), closed_at(Reason::Expired, a)) {
            (Some(d), Some(e)) => Some((
                "cb",
                format!(
                    "Drifted budget closed{} and Expired budget closed{}",
                    name(d),
                    name(e)
                ),
            )),
            (Some(d), None) => Some(("cd", format!("Drifted budget closed{}", name(d)))),
            (None, Some(e)) => Some(("ce", format!("Expired budget closed{}", name(e)))),
            (None, None) => None,
        };
        let Some((class, title)) = piece else {
            continue;
        };
        match out.last_mut() {
            Some(last) if last.0 == class && last.2 == a && last.3 == title => last.2 = b,
            _ => out.push((class, a, b, title)),
        }
    }
    out
}

/// The lane of each rotation (in order): the first lane whose last bar, as drawn (`extent`),
/// ends at least [`BAR_GAP`] before this one starts, so no two bars touch.
fn assign_lanes(
    rotations: &[RotationSpan],
    extent: impl Fn(&RotationSpan) -> (f64, f64),
) -> Vec<usize> {
    let mut ends: Vec<f64> = Vec::new();
    rotations
        .iter()
        .map(|r| {
            let (x0, x1) = extent(r);
            let lane = ends
                .iter()
                .position(|e| *e + BAR_GAP <= x0)
                .unwrap_or(ends.len());
            if lane == ends.len() {
                ends.push(x1);
            } else {
                ends[lane] = x1;
            }
            lane
        })
        .collect()
}

fn zone_name(zone: Tz) -> String {
    if zone == Tz::UTC {
        "UTC".to_string()
    } else {
        zone.name().to_string()
    }
}

/// XML/HTML text and attribute escaping.
fn esc(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            _ => out.push(c),
        }
    }
    out
}

/// What the label column says of a pool, one `(class, text)` per line: its name (wrapped to
/// the column), its node count and when it is done (or that it is not).
fn label_lines(pool: &PoolForecast, zone: Tz) -> Vec<(&'static str, String)> {
    let mut lines: Vec<(&'static str, String)> = wrap(&pool.pool, label_chars(CHAR_W_BOLD))
        .into_iter()
        .map(|l| ("p", l))
        .collect();
    let status = match pool.done {
        Some(d) => (
            "s",
            format!("done {}", d.with_timezone(&zone).format("%a %H:%M")),
        ),
        None => ("nd", "not done by the end".to_string()),
    };
    for (class, text) in [("s", format!("{} nodes", pool.nodes)), status] {
        lines.extend(
            wrap(&text, label_chars(CHAR_W))
                .into_iter()
                .map(|l| (class, l)),
        );
    }
    lines
}

/// How many characters of width `char_w` a label line holds.
fn label_chars(char_w: f64) -> usize {
    ((LABEL_W - LABEL_X - LABEL_GAP) / char_w).floor().max(1.0) as usize
}

/// `text` in lines of at most `max` characters, broken after a `/`, `-`, `_`, `.` or space
/// where one falls in the line, else cut at `max`.
fn wrap(text: &str, max: usize) -> Vec<String> {
    let max = max.max(1);
    let mut lines = Vec::new();
    let mut rest: Vec<char> = text.chars().collect();
    while rest.len() > max {
        let cut = rest[..max]
            .iter()
            .rposition(|c| matches!(c, '/' | '-' | '_' | '.' | ' '))
            .map_or(max, |i| i + 1);
        lines.push(
            rest[..cut]
                .iter()
                .collect::<String>()
                .trim_end()
                .to_string(),
        );
        rest.drain(..cut);
    }
    if !rest.is_empty() || lines.is_empty() {
        lines.push(rest.into_iter().collect());
    }
    lines
}

/// `text` cut to fit `width` px at `char_w` px a character (with `…` when cut); `None` when
/// not even a few characters fit.
fn fit(text: &str, width: f64, char_w: f64) -> Option<String> {
    let max = (width / char_w).floor();
    if max < 4.0 {
        return None;
    }
    let max = max as usize;
    let count = text.chars().count();
    if count <= max {
        return Some(text.to_string());
    }
    let mut cut: String = text.chars().take(max - 1).collect();
    cut.push('…');
    Some(cut)
}

/// The stretch a pool waits for its promotion (from [`super::PromotionForecast`]): from when the
/// new AMI is there to when its desired AMI changes (or the end), with its band's label
/// (`waiting for prod/test soak until <time>`, `waiting for minAge 3h until <time>`) and
/// title (times in `zone`). `None` when it never waits (no promotion, no new AMI, a change at once).
pub fn promotion_wait(
    pool: &PoolForecast,
    end: DateTime<Utc>,
    zone: Tz,
) -> Option<(DateTime<Utc>, DateTime<Utc>, String, String)> {
    let p = pool.promotion.as_ref()?;
    let from = p.waits_from?;
    let to = p.desired_at.map_or(end, |d| d.min(end));
    if to <= from {
        return None;
    }
    let dur = |d: Option<std::time::Duration>| d.map(crate::duration::format);
    let (until, until_long) = match p.desired_at {
        Some(d) if d <= end => (
            format!("until {}", day_time(d, zone)),
            format!("until {}", zoned_short(d, zone)),
        ),
        _ => ("past the end".to_string(), "past the end".to_string()),
    };
    let (label, title) = match (&p.from, &p.indicted) {
        (Some(up), Some((at, ami))) => (
            format!("never: {ami} indicted {}", day_time(*at, zone)),
            format!(
                "never takes {ami}: indicted {} before {up} had run it for soak",
                zoned_short(*at, zone)
            ),
        ),
        (Some(up), None) => {
            let soak = dur(p.soak).map(|s| format!(" {s}")).unwrap_or_default();
            let state = match p.upstream_done {
                Some(done) => format!("{up} done {}", zoned_short(done, zone)),
                None => format!(
                    "{up} not done within the forecast (or not simulated): nothing proves the release"
                ),
            };
            (
                format!("waiting for {up} soak {until}"),
                format!(
                    "waiting for {up} to run the new release for soak{soak} ({state}), {until_long}"
                ),
            )
        }
        (None, _) => {
            let age = dur(p.min_age).unwrap_or_default();
            (
                format!("waiting for minAge {age} {until}"),
                format!("waiting for the new AMI to be minAge {age} old, {until_long}"),
            )
        }
    };
    Some((from, to, label, title))
}

/// `Tue 01 Dec 14:10 UTC`.
fn zoned_short(t: DateTime<Utc>, zone: Tz) -> String {
    let local = t.with_timezone(&zone);
    format!("{} {}", local.format("%a %d %b %H:%M"), offset(local))
}

/// `Tue 14:10 UTC`: for a band's label (its title gives the date).
fn day_time(t: DateTime<Utc>, zone: Tz) -> String {
    let local = t.with_timezone(&zone);
    format!("{} {}", local.format("%a %H:%M"), offset(local))
}

/// Why a pool is not done by the end, `(short, full)`: the promotion it still waits for, else
/// what its nodes still wait on at the end (the gate's name, or the budget), else what they
/// waited on longest, else that its desired AMI does not change within the forecast. `None`
/// when nothing is known.
pub fn not_done_reason(
    pool: &PoolForecast,
    end: DateTime<Utc>,
    zone: Tz,
) -> Option<(String, String)> {
    if let Some((_, to, label, title)) = promotion_wait(pool, end, zone)
        && to >= end
    {
        return Some((label, title));
    }
    let describe = |b: &super::Blocked| {
        let short = match &b.gate {
            Some(g) => format!("{:?} waits: {g}", b.reason),
            None => format!("{:?} waits: {}", b.reason, b.why),
        };
        (short, format!("{:?} waits: {}", b.reason, b.why))
    };
    let at_end: Vec<(String, String)> = pool
        .blocked
        .iter()
        .filter(|b| b.to >= end)
        .map(describe)
        .collect();
    if !at_end.is_empty() {
        let short: Vec<&str> = at_end.iter().map(|(s, _)| s.as_str()).collect();
        let full: Vec<&str> = at_end.iter().map(|(_, f)| f.as_str()).collect();
        return Some((short.join("; "), full.join("; ")));
    }
    if let Some(i) = pool.indicted.as_ref().filter(|i| i.unhealthy_left > 0) {
        let short = format!(
            "{} unhealthy node(s) stay on indicted {} (not drain candidates: repair's)",
            i.unhealthy_left, i.ami
        );
        return Some((short.clone(), format!("{short}; {}", i.label)));
    }
    if let Some(b) = pool.blocked.iter().max_by_key(|b| b.to - b.from) {
        let (short, full) = describe(b);
        return Some((
            format!("longest wait: {short}"),
            format!("longest wait: {full}"),
        ));
    }
    match pool.desired_change {
        Some(at) if at < end => None,
        _ => Some((
            "the desired AMI does not change within the forecast".to_string(),
            "the desired AMI does not change within the forecast".to_string(),
        )),
    }
}
