//! `gpubpf top`: a live terminal view of the node, like `top` for processes and Netflix's
//! `bpftop` for programs.
//!
//! Once a second it reads the registry's live processes (`ps::snapshot`: their stats
//! files), the GPU memory each holds from the quota policy's `proc_usage` map when it is
//! loaded (`--usage-map` names another), and turns the counts into rates against the
//! previous sample. While it runs it keeps per-program statistics collection switched on
//! (renewing the control block's deadline each tick), so run counts and run time grow.
//! Keys: `p` pid, `u` user, `m` memory, `c` calls/s, `d` denials/s sort the processes
//! (again: reverse), `q` or Esc quits. The drawing is in `top_view`.

use std::collections::HashMap;
use std::io::IsTerminal as _;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use crossterm::event::{self, Event, KeyCode, KeyEventKind, KeyModifiers};
use gpubpf_runtime::registry::{monotonic_ns, Registry};

use super::map_series::samples;
use super::ps::{snapshot, Process};
use super::top_view::draw;
use crate::output::Output;

/// Arguments of `gpubpf top`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Seconds between refreshes (`1s`, `500ms`).
    #[arg(long, short = 'd', default_value = "1s", value_name = "DURATION")]
    pub delay: String,
    /// The map whose `bytes` field per pid key is the GPU memory a process holds.
    #[arg(long, default_value = "proc_usage", value_name = "MAP")]
    pub usage_map: String,
}

/// The column the processes are sorted by.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SortKey {
    Pid,
    User,
    Memory,
    Calls,
    Denied,
}

impl SortKey {
    pub fn title(self) -> &'static str {
        match self {
            Self::Pid => "pid",
            Self::User => "user",
            Self::Memory => "memory",
            Self::Calls => "calls/s",
            Self::Denied => "denials/s",
        }
    }
}

/// One attach point of one process.
#[derive(Clone, Debug, Default)]
pub struct PointRow {
    pub attach_point: String,
    pub calls: u64,
    pub denied: u64,
    pub calls_rate: f64,
    pub denied_rate: f64,
}

/// One process.
#[derive(Clone, Debug, Default)]
pub struct ProcRow {
    pub pid: u32,
    pub user: String,
    pub command: String,
    /// GPU memory held, from the usage map (`None`: not loaded or no entry).
    pub memory: Option<u64>,
    pub calls_rate: f64,
    pub denied_rate: f64,
    pub failed: usize,
    pub points: Vec<PointRow>,
}

/// One program, summed over the processes that run it.
#[derive(Clone, Debug, Default)]
pub struct ProgRow {
    pub object: String,
    pub name: String,
    pub attach_point: String,
    pub phase: String,
    pub processes: usize,
    pub runs: u64,
    pub runs_rate: f64,
    pub run_time_ns: u64,
    pub faults: u64,
}

/// What one screen shows.
#[derive(Clone, Debug)]
pub struct Screen {
    pub procs: Vec<ProcRow>,
    pub progs: Vec<ProgRow>,
    pub generation: Option<u64>,
    pub usage_map: Option<String>,
    pub sort: SortKey,
    pub reverse: bool,
    pub note: Option<String>,
}

type ProgKey = (String, String, String, String);

/// Counts of the previous sample, to turn counts into rates.
#[derive(Debug, Default)]
struct Sampler {
    at: Option<Instant>,
    points: HashMap<(u32, String), (u64, u64)>,
    progs: HashMap<ProgKey, u64>,
}

fn rate(now: u64, before: Option<u64>, secs: f64) -> f64 {
    match before {
        Some(b) if secs > 0.0 => now.saturating_sub(b) as f64 / secs,
        _ => 0.0,
    }
}

impl Sampler {
    fn sample(
        &mut self,
        procs: &[Process],
        usage: &HashMap<u32, u64>,
    ) -> (Vec<ProcRow>, Vec<ProgRow>) {
        let now = Instant::now();
        let secs = self.at.map_or(0.0, |t| now.duration_since(t).as_secs_f64());
        let mut points = HashMap::new();
        let mut rows = Vec::new();
        let mut progs: Vec<ProgRow> = Vec::new();
        let mut prog_counts = HashMap::new();
        for p in procs {
            let mut row = ProcRow {
                pid: p.pid,
                user: p.user.clone(),
                command: p.command.clone(),
                memory: usage.get(&p.pid).copied(),
                failed: p.failed_objects.len(),
                ..ProcRow::default()
            };
            for pt in &p.attach_points {
                let key = (p.pid, pt.attach_point.clone());
                let before = self.points.get(&key).copied();
                let pr = PointRow {
                    attach_point: pt.attach_point.clone(),
                    calls: pt.calls,
                    denied: pt.denied,
                    calls_rate: rate(pt.calls, before.map(|b| b.0), secs),
                    denied_rate: rate(pt.denied, before.map(|b| b.1), secs),
                };
                row.calls_rate += pr.calls_rate;
                row.denied_rate += pr.denied_rate;
                row.points.push(pr);
                points.insert(key, (pt.calls, pt.denied));
            }
            for q in &p.programs {
                let key: ProgKey = (
                    q.object.clone(),
                    q.name.clone(),
                    q.attach_point.clone(),
                    q.phase.to_string(),
                );
                // Per process, so an exiting process does not make the sum's rate negative
                // (the key's slots: pid, object, program, phase).
                let per_proc = (
                    p.pid.to_string(),
                    key.0.clone(),
                    key.1.clone(),
                    key.3.clone(),
                );
                let before_proc = self.progs.get(&per_proc).copied();
                let r = rate(q.run_cnt, before_proc, secs);
                prog_counts.insert(per_proc, q.run_cnt);
                match progs.iter_mut().find(|g| {
                    (&g.object, &g.name, &g.attach_point, &g.phase)
                        == (&key.0, &key.1, &key.2, &key.3)
                }) {
                    Some(g) => {
                        g.processes += 1;
                        g.runs += q.run_cnt;
                        g.runs_rate += r;
                        g.run_time_ns += q.run_time_ns;
                        g.faults += q.faults;
                    }
                    None => progs.push(ProgRow {
                        object: key.0,
                        name: key.1,
                        attach_point: key.2,
                        phase: key.3,
                        processes: 1,
                        runs: q.run_cnt,
                        runs_rate: r,
                        run_time_ns: q.run_time_ns,
                        faults: q.faults,
                    }),
                }
            }
            rows.push(row);
        }
        self.at = Some(now);
        self.points = points;
        self.progs = prog_counts;
        progs.sort_by(|a, b| b.run_time_ns.cmp(&a.run_time_ns).then(a.name.cmp(&b.name)));
        (rows, progs)
    }
}

/// Sorts the processes by `key` (numbers largest first, names A to Z), `reverse` flips.
pub fn sort_rows(rows: &mut [ProcRow], key: SortKey, reverse: bool) {
    rows.sort_by(|a, b| {
        let o = match key {
            SortKey::Pid => a.pid.cmp(&b.pid),
            SortKey::User => a.user.cmp(&b.user).then(a.pid.cmp(&b.pid)),
            SortKey::Memory => b.memory.cmp(&a.memory),
            SortKey::Calls => b.calls_rate.total_cmp(&a.calls_rate),
            SortKey::Denied => b.denied_rate.total_cmp(&a.denied_rate),
        };
        if reverse {
            o.reverse()
        } else {
            o
        }
    });
}

/// GPU memory per pid from `map` (the `bytes` field of each value keyed by pid); `None`
/// when the map is not loaded.
fn usage(reg: &Registry, map: &str) -> Option<HashMap<u32, u64>> {
    let real = reg.resolve_map_name(map).ok()?;
    let m = reg.open_map(&real).ok()?;
    let list = samples(&m, "usage").ok()?;
    Some(
        list.into_iter()
            .filter(|s| s.name == "gpubpf_usage_bytes")
            .filter_map(|s| {
                let pid = s.labels.iter().find(|(k, _)| k == "key")?.1.parse().ok()?;
                Some((pid, s.value as u64))
            })
            .collect(),
    )
}

struct Top {
    args: Args,
    reg: Option<Registry>,
    sampler: Sampler,
    sort: SortKey,
    reverse: bool,
}

impl Top {
    fn screen(&mut self) -> Screen {
        if self.reg.is_none() {
            self.reg = super::existing_registry().ok().flatten();
        }
        let Some(reg) = &self.reg else {
            return Screen {
                procs: Vec::new(),
                progs: Vec::new(),
                generation: None,
                usage_map: None,
                sort: self.sort,
                reverse: self.reverse,
                note: Some("no registry yet: nothing is loaded (`gpubpf load`)".into()),
            };
        };
        // Renewed every tick, past the next one: collection stops soon after top exits.
        // Another user than a system registry's owner cannot switch it on: top then shows
        // counts without run times.
        let _ = reg
            .control()
            .enable_stats_until(monotonic_ns().saturating_add(3_000_000_000));
        let generation = reg.generation();
        let procs = snapshot(reg, generation);
        let mem = usage(reg, &self.args.usage_map);
        let (mut rows, progs) = self
            .sampler
            .sample(&procs, mem.as_ref().unwrap_or(&HashMap::new()));
        sort_rows(&mut rows, self.sort, self.reverse);
        Screen {
            procs: rows,
            progs,
            generation: Some(generation),
            usage_map: mem.map(|_| self.args.usage_map.clone()),
            sort: self.sort,
            reverse: self.reverse,
            note: None,
        }
    }

    /// Applies a key; `false` when it quits.
    fn key(&mut self, code: KeyCode, mods: KeyModifiers) -> bool {
        let pick = match code {
            KeyCode::Char('q') | KeyCode::Esc => return false,
            KeyCode::Char('c') if mods.contains(KeyModifiers::CONTROL) => return false,
            KeyCode::Char('p') => SortKey::Pid,
            KeyCode::Char('u') => SortKey::User,
            KeyCode::Char('m') => SortKey::Memory,
            KeyCode::Char('c') => SortKey::Calls,
            KeyCode::Char('d') => SortKey::Denied,
            _ => return true,
        };
        if pick == self.sort {
            self.reverse = !self.reverse;
        } else {
            self.sort = pick;
            self.reverse = false;
        }
        true
    }
}

fn event_loop(
    terminal: &mut ratatui::DefaultTerminal,
    top: &mut Top,
    delay: Duration,
) -> anyhow::Result<()> {
    let mut screen = top.screen();
    let mut next = Instant::now() + delay;
    loop {
        terminal.draw(|f| draw(f, &screen)).context("cannot draw")?;
        let wait = next.saturating_duration_since(Instant::now());
        if event::poll(wait).context("cannot read the terminal")? {
            if let Event::Key(k) = event::read().context("cannot read the terminal")? {
                if k.kind == KeyEventKind::Press {
                    if !top.key(k.code, k.modifiers) {
                        return Ok(());
                    }
                    sort_rows(&mut screen.procs, top.sort, top.reverse);
                    screen.sort = top.sort;
                    screen.reverse = top.reverse;
                }
            }
        }
        if Instant::now() >= next {
            screen = top.screen();
            next = Instant::now() + delay;
        }
    }
}

pub fn run(args: Args, out: &Output) -> anyhow::Result<()> {
    if out.json() {
        bail!("`top` is interactive; `gpubpf -j ps --stats` prints the same counts as JSON");
    }
    let delay = crate::cmd::load::parse_timeout(&args.delay)
        .with_context(|| format!("bad --delay `{}`", args.delay))?;
    if delay < Duration::from_millis(100) {
        bail!("--delay {}: refresh at most ten times a second", args.delay);
    }
    if !std::io::stdout().is_terminal() || !std::io::stdin().is_terminal() {
        bail!("`top` needs a terminal (`gpubpf ps` prints the same once)");
    }
    let mut top = Top {
        args,
        reg: None,
        sampler: Sampler::default(),
        sort: SortKey::Calls,
        reverse: false,
    };
    let mut terminal = ratatui::try_init().context("cannot set up the terminal")?;
    let result = event_loop(&mut terminal, &mut top, delay);
    ratatui::restore();
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(pid: u32, user: &str, mem: Option<u64>, calls: f64) -> ProcRow {
        ProcRow {
            pid,
            user: user.into(),
            memory: mem,
            calls_rate: calls,
            ..ProcRow::default()
        }
    }

    #[test]
    fn sorting_by_each_key_and_reversed() {
        let mut rows = vec![
            row(3, "bob", Some(10), 5.0),
            row(1, "amy", None, 50.0),
            row(2, "cid", Some(99), 0.0),
        ];
        let pids = |r: &[ProcRow]| r.iter().map(|p| p.pid).collect::<Vec<_>>();
        sort_rows(&mut rows, SortKey::Calls, false);
        assert_eq!(pids(&rows), [1, 3, 2]);
        sort_rows(&mut rows, SortKey::Memory, false);
        assert_eq!(pids(&rows), [2, 3, 1]);
        sort_rows(&mut rows, SortKey::Pid, true);
        assert_eq!(pids(&rows), [3, 2, 1]);
        sort_rows(&mut rows, SortKey::User, false);
        assert_eq!(pids(&rows), [1, 3, 2]);
    }

    #[test]
    fn rates_come_from_the_previous_sample_only() {
        assert_eq!(rate(30, None, 1.0), 0.0);
        assert_eq!(rate(30, Some(10), 2.0), 10.0);
        assert_eq!(rate(5, Some(10), 1.0), 0.0);
    }
}
