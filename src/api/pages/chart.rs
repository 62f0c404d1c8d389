//! Inline SVG: the band bar of the index and the subject page's history chart. Pure functions of
//! their inputs; colours come from the stylesheet through classes (no inline style, so the CSP
//! needs no `'unsafe-inline'`).

use std::fmt::Write as _;

use super::facts::{DayPoint, RevisionMark};
use super::html::{coord, escape, number, text};
use crate::checks::history::OutageWindow;
use crate::clock::rfc3339_ms;

const DAY_MS: i64 = 86_400_000;

/// A horizontal bar on the 0..=100 scale: the band shaded, the score as a tick.
pub(crate) fn band_bar(score: f64, low: f64, high: f64) -> String {
    const W: f64 = 100.0;
    let x = |v: f64| v.clamp(0.0, 100.0) / 100.0 * W;
    let (lo, hi) = (x(low.min(high)), x(high.max(low)));
    format!(
        "<svg class=\"bar\" viewBox=\"0 0 100 12\" preserveAspectRatio=\"none\" role=\"img\" \
         aria-label=\"score {s} in band {l} to {h}\">\
         <rect class=\"bar-track\" x=\"0\" y=\"3\" width=\"100\" height=\"6\" rx=\"3\"/>\
         <rect class=\"bar-band\" x=\"{bx}\" y=\"1\" width=\"{bw}\" height=\"10\" rx=\"2\"/>\
         <rect class=\"bar-score\" x=\"{sx}\" y=\"0\" width=\"1.6\" height=\"12\"/></svg>",
        s = number(score, 2),
        l = number(low, 2),
        h = number(high, 2),
        bx = coord(lo),
        bw = coord((hi - lo).max(0.8)),
        sx = coord((x(score) - 0.8).clamp(0.0, W - 1.6)),
    )
}

/// The geometry of the chart's plot area.
struct Frame {
    t0: i64,
    t1: i64,
}

const WIDTH: f64 = 720.0;
const HEIGHT: f64 = 260.0;
const LEFT: f64 = 46.0;
const RIGHT: f64 = 10.0;
const TOP: f64 = 26.0;
const BOTTOM: f64 = 32.0;

impl Frame {
    fn x(&self, t: i64) -> f64 {
        let span = (self.t1 - self.t0).max(1) as f64;
        LEFT + ((t.clamp(self.t0, self.t1) - self.t0) as f64 / span) * (WIDTH - LEFT - RIGHT)
    }

    fn y(&self, v: f64) -> f64 {
        let v = if v.is_finite() {
            v.clamp(0.0, 100.0)
        } else {
            0.0
        };
        TOP + (100.0 - v) / 100.0 * (HEIGHT - TOP - BOTTOM)
    }
}

/// The history chart: the band as a shaded area, the score as a line with a point per day, our
/// outages shaded across the plot, revisions as marked vertical lines, days along the bottom.
/// `None` when there is no history to draw.
pub(crate) fn history_chart(
    days: &[DayPoint],
    outages: &[OutageWindow],
    revisions: &[RevisionMark],
) -> Option<String> {
    let first = days.first()?;
    let last = days.last()?;
    let t0 = first.as_of_ms.div_euclid(DAY_MS) * DAY_MS;
    let t1 = last.as_of_ms.max(t0 + DAY_MS);
    let f = Frame { t0, t1 };
    let mut s = String::new();
    let _ = write!(
        s,
        "<svg class=\"chart\" viewBox=\"0 0 {WIDTH} {HEIGHT}\" role=\"img\" \
         aria-labelledby=\"chart-title\"><title id=\"chart-title\">Score and band by day, \
         {} to {}</title>",
        text(&first.day, 300),
        text(&last.day, 300)
    );

    // Our outages first, under everything else.
    for w in outages {
        let to = w.to_ms.unwrap_or(t1);
        if to <= t0 || w.from_ms >= t1 {
            continue;
        }
        let (x0, x1) = (f.x(w.from_ms), f.x(to));
        let _ = write!(
            s,
            "<rect class=\"outage\" x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\">\
             <title>our outage {} to {}</title></rect>",
            coord(x0),
            coord(TOP),
            coord((x1 - x0).max(1.5)),
            coord(HEIGHT - TOP - BOTTOM),
            escape(&rfc3339_ms(w.from_ms)),
            escape(&w.to_ms.map_or("now".to_string(), rfc3339_ms)),
        );
    }

    // Grid: scores every 25, a line and a label at each midnight (thinned to at most 10 labels).
    for v in [0.0, 25.0, 50.0, 75.0, 100.0] {
        let y = coord(f.y(v));
        let _ = write!(
            s,
            "<line class=\"grid\" x1=\"{LEFT}\" x2=\"{}\" y1=\"{y}\" y2=\"{y}\"/>\
             <text class=\"axis\" x=\"{}\" y=\"{}\" text-anchor=\"end\">{}</text>",
            coord(WIDTH - RIGHT),
            coord(LEFT - 4.0),
            coord(f.y(v) + 4.0),
            number(v, 0)
        );
    }
    let day_count = ((t1 - t0) / DAY_MS).max(1);
    let label_every = (day_count + 9) / 10;
    let mut midnight = t0;
    let mut n = 0;
    while midnight <= t1 {
        let x = coord(f.x(midnight));
        let _ = write!(
            s,
            "<line class=\"grid\" x1=\"{x}\" x2=\"{x}\" y1=\"{}\" y2=\"{}\"/>",
            coord(TOP),
            coord(HEIGHT - BOTTOM)
        );
        if n % label_every == 0 && midnight < t1 {
            let _ = write!(
                s,
                "<text class=\"axis\" x=\"{}\" y=\"{}\">{}</text>",
                coord(f.x(midnight) + 3.0),
                coord(HEIGHT - 8.0),
                escape(&rfc3339_ms(midnight)[5..10])
            );
        }
        midnight += DAY_MS;
        n += 1;
    }

    // The band: highs left to right, then lows back.
    if days.len() > 1 {
        let mut points: Vec<String> = days
            .iter()
            .map(|d| format!("{},{}", coord(f.x(d.as_of_ms)), coord(f.y(d.high))))
            .collect();
        points.extend(
            days.iter()
                .rev()
                .map(|d| format!("{},{}", coord(f.x(d.as_of_ms)), coord(f.y(d.low)))),
        );
        let _ = write!(
            s,
            "<polygon class=\"area\" points=\"{}\"/>",
            points.join(" ")
        );
        let line: Vec<String> = days
            .iter()
            .map(|d| format!("{},{}", coord(f.x(d.as_of_ms)), coord(f.y(d.capped_score))))
            .collect();
        let _ = write!(
            s,
            "<polyline class=\"line\" points=\"{}\"/>",
            line.join(" ")
        );
    } else {
        // One day: its band as a short bar.
        let x = f.x(first.as_of_ms);
        let _ = write!(
            s,
            "<rect class=\"area\" x=\"{}\" y=\"{}\" width=\"6\" height=\"{}\"/>",
            coord(x - 3.0),
            coord(f.y(first.high)),
            coord((f.y(first.low) - f.y(first.high)).max(1.0))
        );
    }
    for d in days {
        let _ = write!(
            s,
            "<circle class=\"point verdict-{v}\" cx=\"{}\" cy=\"{}\" r=\"3.5\">\
             <title>{} score {} band {} to {} ({v})</title></circle>",
            coord(f.x(d.as_of_ms)),
            coord(f.y(d.capped_score)),
            text(&d.day, 300),
            number(d.capped_score, 2),
            number(d.low, 2),
            number(d.high, 2),
            v = d.verdict.as_str(),
        );
    }

    // Revisions on top, labelled.
    for r in revisions {
        if r.at_ms < t0 || r.at_ms > t1 {
            continue;
        }
        let x = f.x(r.at_ms);
        let _ = write!(
            s,
            "<line class=\"rev\" x1=\"{x}\" x2=\"{x}\" y1=\"{}\" y2=\"{}\">\
             <title>revision {} at {}: {}</title></line>\
             <text class=\"rev-label\" x=\"{}\" y=\"{}\">{}</text>",
            coord(TOP),
            coord(HEIGHT - BOTTOM),
            text(&r.id, 300),
            escape(&rfc3339_ms(r.at_ms)),
            text(&r.changed.join(", "), 300),
            coord(x + 3.0),
            coord(TOP - 4.0),
            text(&r.id, 300),
            x = coord(x),
        );
    }
    s.push_str("</svg>");
    Some(s)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rubric::Verdict;

    fn day(i: i64, score: f64) -> DayPoint {
        DayPoint {
            day: rfc3339_ms(i * DAY_MS)[..10].to_string(),
            as_of_ms: i * DAY_MS + 20 * 3_600_000,
            capped_score: score,
            low: score - 10.0,
            high: score + 5.0,
            verdict: Verdict::Ok,
        }
    }

    #[test]
    fn the_bar_places_band_and_score_on_the_scale() {
        let bar = band_bar(50.0, 40.0, 70.0);
        assert!(
            bar.contains("class=\"bar-band\" x=\"40.0\" y=\"1\" width=\"30.0\""),
            "{bar}"
        );
        assert!(bar.contains("class=\"bar-score\" x=\"49.2\""), "{bar}");
        // Out-of-range values stay on the bar.
        let bar = band_bar(f64::NAN, -5.0, 200.0);
        assert!(bar.contains("x=\"0.0\" y=\"1\" width=\"100.0\""), "{bar}");
    }

    #[test]
    fn the_chart_draws_band_line_outages_and_revisions() {
        let days = [day(10, 60.0), day(11, 40.0), day(12, 80.0)];
        let outages = [OutageWindow {
            from_ms: 11 * DAY_MS,
            to_ms: Some(11 * DAY_MS + 6 * 3_600_000),
            of: crate::ledger::record::OutageOf::Vantage,
        }];
        let revisions = [RevisionMark {
            id: "r1".into(),
            at_ms: 11 * DAY_MS + 12 * 3_600_000,
            changed: vec!["price".into()],
        }];
        let svg = history_chart(&days, &outages, &revisions).unwrap();
        assert_eq!(svg.matches("<polygon class=\"area\"").count(), 1);
        assert_eq!(svg.matches("<polyline class=\"line\"").count(), 1);
        assert_eq!(svg.matches("<circle class=\"point").count(), 3);
        assert_eq!(svg.matches("<rect class=\"outage\"").count(), 1);
        assert!(svg.contains("revision r1 at") && svg.contains(">r1</text>"));
        // The band polygon has each day twice (high, then low).
        let polygon = svg.split("points=\"").nth(1).unwrap();
        assert_eq!(polygon.split('"').next().unwrap().split(' ').count(), 6);
        // Nothing to draw without history; an outage outside the days is left out.
        assert!(history_chart(&[], &outages, &revisions).is_none());
        let svg = history_chart(&days[..1], &outages, &[]).unwrap();
        assert!(!svg.contains("class=\"outage\""));
        assert!(svg.contains("<rect class=\"area\""));
    }
}
