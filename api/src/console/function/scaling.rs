//! How many instances served a function over the last hour, as a step
//! chart drawn on the server (inline SVG, no script): the function's
//! stream, read through the audit log's route, folded by the domain's own
//! aggregate, with after each event the count the API shows
//! (`FunctionView::instances`), so the chart ends where the page's number
//! is. What moves it: `FunctionDeployed` (it serves), `FunctionScaled`
//! (`from` → `to`), `FunctionScaledToZero` (0), `FunctionScaledUp` (a call
//! starts it again: it counts once it is deployed), and a spec change of
//! `min_instances` or `max_instances`, which bounds the count at once.

use axum::extract::{Query, State};
use axum::response::Response;
use chrono::{DateTime, Duration, Utc};
use maud::{Markup, html};
use sless_api_types::EventPage;
use sless_domain::{Function, FunctionEvent, FunctionKey, FunctionName};

use super::super::calls::api_json;
use super::super::page;
use crate::AppState;
use crate::plumbing::auth::Caller;
use crate::plumbing::error::ApiError;
use crate::plumbing::path::PathParams;

/// The chart's window, in minutes.
const WINDOW_MIN: i64 = 60;
/// Events read at once.
const PAGE: u32 = 1000;
/// The most pages of the stream read: a longer stream is not charted.
const MAX_PAGES: usize = 20;

/// A change of the instances serving: when, and how many from then on.
pub type Step = (DateTime<Utc>, u32);

/// The function's changes of the instances serving, oldest first, from
/// its whole stream; `None` when the stream is longer than the fold reads.
pub async fn history(
    state: &AppState,
    caller: &Caller,
    ns: &str,
    name: &str,
) -> Result<Option<Vec<Step>>, Response> {
    let namespace = caller.namespace(ns).map_err(page::failure)?;
    let function = FunctionName::parse(name)
        .map_err(|e| page::failure(ApiError::invalid("name", e.to_string())))?;
    let key = FunctionKey::new(namespace, function);
    let mut f = Function::default();
    let mut steps: Vec<Step> = Vec::new();
    let mut after: Option<String> = None;
    for _ in 0..MAX_PAGES {
        let mut q = vec![
            ("function".to_owned(), name.to_owned()),
            ("order".to_owned(), "oldest".to_owned()),
            ("limit".to_owned(), PAGE.to_string()),
        ];
        q.extend(after.take().map(|a| ("after".to_owned(), a)));
        let page: EventPage = api_json(crate::rest::events::list(
            State(state.clone()),
            caller.clone(),
            PathParams(ns.to_owned()),
            Ok(Query(q)),
        ))
        .await?;
        for e in &page.items {
            let Ok(event) = FunctionEvent::from_stored(&e.event_type, &e.data) else {
                continue;
            };
            f = f.evolve(&event);
            let n = crate::rest::function::view_of_state(None, &key, &f)
                .instances
                .unwrap_or(0);
            let at = DateTime::parse_from_rfc3339(&e.time).map(|t| t.to_utc());
            if let Ok(at) = at
                && steps.last().map_or(0, |(_, last)| *last) != n
            {
                steps.push((at, n));
            }
        }
        match page.next {
            Some(next) => after = Some(next),
            None => return Ok(Some(steps)),
        }
    }
    Ok(None)
}

/// The instances serving over the hour up to `now`, as a step line: the
/// count before the hour, then each change in it.
pub fn chart(steps: &[Step], now: DateTime<Utc>) -> Markup {
    let start = now - Duration::minutes(WINDOW_MIN);
    let before = steps
        .iter()
        .take_while(|(t, _)| *t <= start)
        .last()
        .map_or(0, |s| s.1);
    let inside: Vec<Step> = steps
        .iter()
        .copied()
        .filter(|(t, _)| *t > start && *t <= now)
        .collect();
    let top = inside
        .iter()
        .map(|s| s.1)
        .chain([before, 1])
        .max()
        .unwrap_or(1);
    let (w, h, pad) = (600.0, 120.0, 30.0);
    let window_ms = (WINDOW_MIN * 60_000) as f64;
    let x = |t: DateTime<Utc>| {
        pad + (w - 2.0 * pad) * ((t - start).num_milliseconds() as f64 / window_ms)
    };
    let y = |n: u32| h - pad - (h - 2.0 * pad) * (f64::from(n) / f64::from(top));
    let mut points = vec![(x(start), y(before))];
    let mut level = before;
    for (t, n) in &inside {
        points.push((x(*t), y(level)));
        points.push((x(*t), y(*n)));
        level = *n;
    }
    points.push((x(now), y(level)));
    let line = points
        .iter()
        .map(|(px, py)| format!("{px:.1},{py:.1}"))
        .collect::<Vec<_>>()
        .join(" ");
    let changes = inside.len();
    html! {
        figure.chart {
            svg viewBox=(format!("0 0 {w} {h}")) width="600" height="120" role="img"
                aria-label="Instances serving, the last hour" {
                line x1=(pad) y1=(h - pad) x2=(w - pad) y2=(h - pad) class="axis" {}
                line x1=(pad) y1=(pad) x2=(pad) y2=(h - pad) class="axis" {}
                text x="2" y=(pad + 4.0) class="label" { (top) }
                text x="2" y=(h - pad) class="label" { "0" }
                text x=(pad) y=(h - 8.0) class="label" { "−60 min" }
                text x=(w - pad - 20.0) y=(h - 8.0) class="label" { "now" }
                polyline points=(line) class="instances" {}
            }
            figcaption {
                span.instances { "Instances serving" } ", the last hour: " (level) " now, "
                (changes) (if changes == 1 { " change" } else { " changes" })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(text).unwrap().to_utc()
    }

    /// The chart's line, as (x, y) points.
    fn points(svg: &str) -> Vec<(f64, f64)> {
        let from = svg.find("points=\"").unwrap() + "points=\"".len();
        let to = from + svg[from..].find('"').unwrap();
        svg[from..to]
            .split(' ')
            .map(|p| {
                let (x, y) = p.split_once(',').unwrap();
                (x.parse().unwrap(), y.parse().unwrap())
            })
            .collect()
    }

    #[test]
    fn the_line_steps_at_each_change_from_the_count_before_the_hour() {
        let now = at("2026-12-04T12:00:00Z");
        // (changes, the levels the line goes through, the caption's count)
        type Case<'a> = (&'a [(&'a str, u32)], &'a [u32], &'a str);
        let cases: &[Case] = &[
            (&[], &[0, 0], "0 now, 0 changes"),
            (&[("2026-12-04T09:00:00Z", 2)], &[2, 2], "2 now, 0 changes"),
            (
                &[
                    ("2026-12-04T09:00:00Z", 1),
                    ("2026-12-04T11:30:00Z", 3),
                    ("2026-12-04T11:50:00Z", 0),
                    ("2026-12-04T11:55:00Z", 2),
                ],
                &[1, 1, 3, 3, 0, 0, 2, 2],
                "2 now, 3 changes",
            ),
            (
                &[("2026-12-04T11:59:00Z", 1)],
                &[0, 0, 1, 1],
                "1 now, 1 change",
            ),
        ];
        for (changes, levels, caption) in cases {
            let steps: Vec<Step> = changes.iter().map(|(t, n)| (at(t), *n)).collect();
            let svg = chart(&steps, now).into_string();
            let top = levels.iter().copied().max().unwrap().max(1);
            let line = points(&svg);
            let ys: Vec<u32> = line
                .iter()
                .map(|(_, y)| ((90.0 - y) / 60.0 * f64::from(top)).round() as u32)
                .collect();
            assert_eq!(&ys, levels, "{changes:?}: {svg}");
            assert!(
                line.windows(2).all(|p| p[0].0 <= p[1].0),
                "time goes right: {svg}"
            );
            assert_eq!(
                (line[0].0, line[line.len() - 1].0),
                (30.0, 570.0),
                "the whole hour: {svg}"
            );
            assert!(svg.contains(caption), "{caption:?}: {svg}");
        }
    }
}
