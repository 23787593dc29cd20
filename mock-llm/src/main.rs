//! `mock-llm --listen 127.0.0.1:9000 --config config/mock-llm.yaml`

use mock_llm::{app::App, core::config::Config, server};
use std::sync::Arc;

const USAGE: &str = "usage: mock-llm [--listen ADDR] [--config PATH] [--validate]";

fn main() {
    let mut listen: Option<String> = None;
    let mut config = "config/mock-llm.yaml".to_string();
    let mut validate = false;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--listen" => listen = args.next(),
            "--config" => match args.next() {
                Some(c) => config = c,
                None => fail("--config needs a path"),
            },
            "--validate" => validate = true,
            "-h" | "--help" => {
                println!("{USAGE}");
                return;
            }
            other => fail(&format!("unknown argument {other}\n{USAGE}")),
        }
    }
    let cfg = match Config::load(&config) {
        Ok(c) => c,
        Err(e) => fail(&e),
    };
    if validate {
        eprintln!("mock-llm: config {config} is valid");
        return;
    }
    let addr = listen.unwrap_or_else(|| cfg.listen.clone());
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => fail(&format!("runtime: {e}")),
    };
    rt.block_on(async move {
        let listener = match tokio::net::TcpListener::bind(&addr).await {
            Ok(l) => l,
            Err(e) => fail(&format!("listen {addr}: {e}")),
        };
        let local = listener.local_addr().map(|a| a.to_string()).unwrap_or(addr);
        let app = Arc::new(App::new(&cfg));
        eprintln!(
            "mock-llm listening on {local} (config {config}, {} providers)",
            app.providers.len()
        );
        tokio::select! {
            _ = server::serve(listener, app) => {}
            _ = shutdown() => {}
        }
    });
}

async fn shutdown() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        if let Ok(mut term) = signal(SignalKind::terminate()) {
            tokio::select! {
                _ = term.recv() => {}
                _ = tokio::signal::ctrl_c() => {}
            }
            return;
        }
    }
    let _ = tokio::signal::ctrl_c().await;
}

fn fail(msg: &str) -> ! {
    eprintln!("mock-llm: {msg}");
    std::process::exit(2)
}
