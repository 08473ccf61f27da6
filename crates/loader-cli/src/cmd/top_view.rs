//! The drawing of `gpubpf top` (ratatui): a header, the processes with their attach
//! points, and the programs summed over the processes, as `bpftop` lists them.

use ratatui::layout::{Constraint, Layout};
use ratatui::style::{Modifier, Style};
use ratatui::text::Line;
use ratatui::widgets::{Block, Borders, Paragraph, Row, Table};
use ratatui::Frame;

use super::ps::duration_text;
use super::top::Screen;

/// Bytes in binary units (`1.5GiB`).
pub fn bytes_text(b: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = b as f64;
    let mut i = 0;
    while v >= 1024.0 && i + 1 < UNITS.len() {
        v /= 1024.0;
        i += 1;
    }
    if i == 0 {
        format!("{b}B")
    } else {
        format!("{v:.1}{}", UNITS[i])
    }
}

fn rate_text(r: f64) -> String {
    if r >= 100.0 {
        format!("{r:.0}")
    } else {
        format!("{r:.1}")
    }
}

fn header(s: &Screen) -> Line<'static> {
    let gen = s.generation.map_or_else(|| "-".into(), |g| g.to_string());
    let mem = s.usage_map.as_deref().map_or_else(
        || "memory: no quota map loaded".to_string(),
        |m| format!("memory from map {m}"),
    );
    Line::from(format!(
        "gpubpf top  processes {}  generation {gen}  {mem}  sort: {}{}  \
         [p]id [u]ser [m]em [c]alls [d]enials  [q]uit",
        s.procs.len(),
        s.sort.title(),
        if s.reverse { " (reversed)" } else { "" },
    ))
}

fn bold() -> Style {
    Style::default().add_modifier(Modifier::BOLD)
}

fn process_table(s: &Screen) -> Table<'static> {
    let mut rows = Vec::new();
    for p in &s.procs {
        rows.push(
            Row::new(vec![
                p.pid.to_string(),
                p.user.clone(),
                p.memory.map_or_else(|| "-".into(), bytes_text),
                rate_text(p.calls_rate),
                rate_text(p.denied_rate),
                if p.failed > 0 {
                    format!("{} [{} failed objects]", p.command, p.failed)
                } else {
                    p.command.clone()
                },
            ])
            .style(bold()),
        );
        // The attach points that saw calls (the others have programs but nothing to show).
        for pt in p.points.iter().filter(|pt| pt.calls > 0) {
            rows.push(Row::new(vec![
                String::new(),
                String::new(),
                String::new(),
                rate_text(pt.calls_rate),
                rate_text(pt.denied_rate),
                format!(
                    "  {}  calls {}  denied {}",
                    pt.attach_point, pt.calls, pt.denied
                ),
            ]));
        }
    }
    Table::new(
        rows,
        [
            Constraint::Length(8),
            Constraint::Length(10),
            Constraint::Length(10),
            Constraint::Length(10),
            Constraint::Length(10),
            Constraint::Min(20),
        ],
    )
    .header(
        Row::new([
            "PID",
            "USER",
            "GPU MEM",
            "CALLS/s",
            "DENIED/s",
            "COMMAND / ATTACH POINT",
        ])
        .style(bold()),
    )
    .block(Block::default().borders(Borders::TOP).title(" processes "))
}

fn program_table(s: &Screen) -> Table<'static> {
    let rows = s.progs.iter().map(|q| {
        let avg = q.run_time_ns.checked_div(q.runs).unwrap_or(0);
        Row::new(vec![
            format!("{}/{}", q.object, q.name),
            format!("{} {}", q.attach_point, q.phase),
            q.processes.to_string(),
            q.runs.to_string(),
            rate_text(q.runs_rate),
            duration_text(q.run_time_ns),
            duration_text(avg),
            q.faults.to_string(),
        ])
    });
    Table::new(
        rows.collect::<Vec<_>>(),
        [
            Constraint::Min(20),
            Constraint::Length(26),
            Constraint::Length(6),
            Constraint::Length(10),
            Constraint::Length(9),
            Constraint::Length(10),
            Constraint::Length(9),
            Constraint::Length(7),
        ],
    )
    .header(
        Row::new([
            "PROGRAM",
            "ATTACH POINT",
            "PROCS",
            "RUNS",
            "RUNS/s",
            "TIME",
            "AVG",
            "FAULTS",
        ])
        .style(bold()),
    )
    .block(Block::default().borders(Borders::TOP).title(" programs "))
}

/// Draws one screen.
pub fn draw(f: &mut Frame<'_>, s: &Screen) {
    let prog_height = (s.progs.len() as u16)
        .saturating_add(3)
        .min(f.area().height / 3);
    let [top, procs, progs] = Layout::vertical([
        Constraint::Length(1),
        Constraint::Min(3),
        Constraint::Length(prog_height.max(3)),
    ])
    .areas(f.area());
    f.render_widget(Paragraph::new(header(s)), top);
    if let Some(note) = &s.note {
        f.render_widget(Paragraph::new(note.clone()), procs);
    } else if s.procs.is_empty() {
        f.render_widget(Paragraph::new("no process is running the shim"), procs);
    } else {
        f.render_widget(process_table(s), procs);
    }
    f.render_widget(program_table(s), progs);
}

#[cfg(test)]
mod tests {
    use super::super::top::{PointRow, ProcRow, ProgRow, SortKey};
    use super::*;
    use ratatui::backend::TestBackend;
    use ratatui::Terminal;

    #[test]
    fn a_screen_shows_processes_attach_points_and_programs() {
        let screen = Screen {
            procs: vec![ProcRow {
                pid: 4242,
                user: "alice".into(),
                command: "python train.py".into(),
                memory: Some(3 << 30),
                calls_rate: 12.0,
                denied_rate: 1.0,
                failed: 0,
                points: vec![PointRow {
                    attach_point: "cuMemAlloc".into(),
                    calls: 77,
                    denied: 5,
                    calls_rate: 12.0,
                    denied_rate: 1.0,
                }],
            }],
            progs: vec![ProgRow {
                object: "quota".into(),
                name: "on_alloc".into(),
                attach_point: "cuMemAlloc".into(),
                phase: "entry".into(),
                processes: 1,
                runs: 70,
                runs_rate: 12.0,
                run_time_ns: 7000,
                faults: 0,
            }],
            generation: Some(3),
            usage_map: Some("proc_usage".into()),
            sort: SortKey::Memory,
            reverse: false,
            note: None,
        };
        let mut t = Terminal::new(TestBackend::new(140, 20)).expect("terminal");
        t.draw(|f| draw(f, &screen)).expect("draw");
        let text: String = t
            .backend()
            .buffer()
            .content()
            .chunks(140)
            .map(|l| l.iter().map(|c| c.symbol()).collect::<String>() + "\n")
            .collect();
        for want in [
            "4242",
            "alice",
            "3.0GiB",
            "cuMemAlloc  calls 77  denied 5",
            "quota/on_alloc",
            "sort: memory",
            "7000ns",
        ] {
            assert!(text.contains(want), "{want} missing in\n{text}");
        }
        assert_eq!(bytes_text(512), "512B");
    }
}
