//! `lab up` starts the whole lab in the background and prints its JSON manifest; `lab down` stops
//! exactly what `up` started. `lab serve` is the background process itself (or a foreground lab).
//!
//! State (the pid file and the manifest) lives in `--state-dir`, by default a per-user directory under
//! the system's temporary directory.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use x402_lab::{Lab, LabOptions};

const USAGE: &str = "usage: lab up [--state-dir DIR] [--scenario NAME]...
       lab down [--state-dir DIR]
       lab serve [--state-dir DIR] [--scenario NAME]...   (foreground)
       lab scenarios";

struct Args {
    command: String,
    state_dir: PathBuf,
    scenarios: Vec<String>,
}

fn parse_args() -> Result<Args> {
    let mut args = std::env::args().skip(1);
    let command = args.next().unwrap_or_default();
    let uid = unsafe { libc::getuid() };
    let mut state_dir = std::env::temp_dir().join(format!("x402-lab-{uid}"));
    let mut scenarios = Vec::new();
    while let Some(a) = args.next() {
        match a.as_str() {
            "--state-dir" => state_dir = args.next().context("--state-dir needs a value")?.into(),
            "--scenario" => scenarios.push(args.next().context("--scenario needs a value")?),
            "-h" | "--help" => {
                println!("{USAGE}");
                std::process::exit(0)
            }
            other => bail!("unknown argument {other:?}\n{USAGE}"),
        }
    }
    Ok(Args {
        command,
        state_dir,
        scenarios,
    })
}

fn main() {
    let result = parse_args().and_then(|args| match args.command.as_str() {
        "up" => up(&args),
        "down" => down(&args.state_dir),
        "serve" => serve(&args),
        "scenarios" => {
            for s in x402_lab::scenarios::all() {
                println!("{:<24} {}", s.name, s.summary);
            }
            Ok(())
        }
        _ => bail!("{USAGE}"),
    });
    if let Err(e) = result {
        eprintln!("lab: {e:#}");
        std::process::exit(2);
    }
}

fn pid_file(dir: &Path) -> PathBuf {
    dir.join("lab.pid")
}

fn manifest_file(dir: &Path) -> PathBuf {
    dir.join("manifest.json")
}

fn running_pid(dir: &Path) -> Option<i32> {
    let pid: i32 = std::fs::read_to_string(pid_file(dir))
        .ok()?
        .trim()
        .parse()
        .ok()?;
    // Signal 0 only asks whether the process exists.
    (unsafe { libc::kill(pid, 0) } == 0).then_some(pid)
}

fn up(args: &Args) -> Result<()> {
    create_private_dir(&args.state_dir)?;
    if let Some(pid) = running_pid(&args.state_dir) {
        bail!("a lab is already running (pid {pid}); run `lab down` first");
    }
    let _ = std::fs::remove_file(manifest_file(&args.state_dir));
    let exe = std::env::current_exe().context("finding this executable")?;
    let log = std::fs::File::create(args.state_dir.join("lab.log"))?;
    let mut cmd = Command::new(exe);
    cmd.arg("serve").arg("--state-dir").arg(&args.state_dir);
    for s in &args.scenarios {
        cmd.arg("--scenario").arg(s);
    }
    cmd.stdin(Stdio::null()).stdout(Stdio::null()).stderr(log);
    // A session of its own, so the lab outlives this command and its terminal.
    use std::os::unix::process::CommandExt;
    unsafe {
        cmd.pre_exec(|| {
            libc::setsid();
            Ok(())
        });
    }
    let mut child = cmd.spawn().context("starting the lab process")?;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok(m) = std::fs::read_to_string(manifest_file(&args.state_dir)) {
            println!("{m}");
            return Ok(());
        }
        if let Some(status) = child.try_wait()? {
            let log = std::fs::read_to_string(args.state_dir.join("lab.log")).unwrap_or_default();
            bail!("the lab exited during start ({status}):\n{log}");
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            bail!("the lab did not come up within 30 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn down(dir: &Path) -> Result<()> {
    let Some(pid) = running_pid(dir) else {
        let _ = std::fs::remove_file(pid_file(dir));
        println!("no lab running");
        return Ok(());
    };
    unsafe { libc::kill(pid, libc::SIGTERM) };
    let deadline = Instant::now() + Duration::from_secs(10);
    while unsafe { libc::kill(pid, 0) } == 0 {
        if Instant::now() > deadline {
            unsafe { libc::kill(pid, libc::SIGKILL) };
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = std::fs::remove_file(pid_file(dir));
    let _ = std::fs::remove_file(manifest_file(dir));
    println!("lab stopped (pid {pid})");
    Ok(())
}

fn serve(args: &Args) -> Result<()> {
    create_private_dir(&args.state_dir)?;
    let runtime = tokio::runtime::Runtime::new()?;
    runtime.block_on(async {
        let options = LabOptions {
            scenarios: (!args.scenarios.is_empty()).then(|| args.scenarios.clone()),
            ..LabOptions::default()
        };
        let lab = Lab::start_with(options).await?;
        std::fs::write(
            pid_file(&args.state_dir),
            format!("{}\n", std::process::id()),
        )?;
        // Write the manifest last and atomically: its presence means the lab is up.
        let tmp = args.state_dir.join("manifest.json.tmp");
        std::fs::write(&tmp, serde_json::to_string_pretty(&lab.manifest())?)?;
        std::fs::rename(&tmp, manifest_file(&args.state_dir))?;
        eprintln!(
            "lab: up in {:?} with {} endpoints",
            lab.startup_time,
            lab.endpoints.len()
        );
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
        tokio::select! {
            _ = term.recv() => {}
            _ = tokio::signal::ctrl_c() => {}
        }
        drop(lab);
        let _ = std::fs::remove_file(manifest_file(&args.state_dir));
        let _ = std::fs::remove_file(pid_file(&args.state_dir));
        anyhow::Ok(())
    })
}

fn create_private_dir(dir: &Path) -> Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .with_context(|| format!("creating {}", dir.display()))
}
