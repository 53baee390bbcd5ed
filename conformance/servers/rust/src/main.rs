//! The conformance matrix's server on rmcp (the Rust SDK): the same five tools as every server of the
//! matrix, each execution counted, the counts read at GET /count.
//!
//!     conformance-rust MODE    MODE: session (rmcp's default: session ids, a priming event on
//!                              each stream) | stateless | json (stateless, JSON answers)
//!
//! It listens on 127.0.0.1 (a free port) and prints "READY <port>" once it accepts connections.
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use rmcp::handler::server::{router::tool::ToolRouter, wrapper::Parameters};
use rmcp::model::{CallToolResult, ContentBlock, ServerCapabilities, ServerConfig};
use rmcp::transport::streamable_http_server::{
    session::local::LocalSessionManager, StreamableHttpServerConfig, StreamableHttpService,
};
use rmcp::{schemars, tool, tool_handler, tool_router, ErrorData, ServerHandler};

type Counts = Arc<Mutex<HashMap<String, u64>>>;

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Search {
    query: String,
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Charge {
    amount: i64,
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Bulk {
    size: usize,
}

#[derive(Clone)]
struct Tools {
    counts: Counts,
    tool_router: ToolRouter<Self>,
}

impl Tools {
    fn ran(&self, tool: &str) {
        *self.counts.lock().unwrap().entry(tool.to_string()).or_insert(0) += 1;
    }
}

fn text(s: String) -> CallToolResult {
    CallToolResult::success(vec![ContentBlock::text(s)])
}

#[tool_router]
impl Tools {
    #[tool(description = "read-only search")]
    fn search(&self, Parameters(Search { query }): Parameters<Search>) -> Result<CallToolResult, ErrorData> {
        self.ran("search");
        Ok(text(format!("found {query}")))
    }

    #[tool(description = "charges once per call")]
    fn charge(&self, Parameters(Charge { amount }): Parameters<Charge>) -> Result<CallToolResult, ErrorData> {
        self.ran("charge");
        Ok(text(format!("charged {amount}")))
    }

    #[tool(description = "a tool error (isError)")]
    fn fail(&self) -> Result<CallToolResult, ErrorData> {
        self.ran("fail");
        Ok(CallToolResult::error(vec![ContentBlock::text("the tool failed")]))
    }

    #[tool(description = "a JSON-RPC error")]
    fn reject(&self) -> Result<CallToolResult, ErrorData> {
        self.ran("reject");
        Err(ErrorData::invalid_params("rejected by the server", None))
    }

    #[tool(description = "an answer of the given size")]
    fn bulk(&self, Parameters(Bulk { size }): Parameters<Bulk>) -> Result<CallToolResult, ErrorData> {
        self.ran("bulk");
        Ok(text("x".repeat(size)))
    }
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for Tools {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }
}

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let mode = std::env::args().nth(1).unwrap_or_else(|| "session".into());
    let config = match mode.as_str() {
        "session" => StreamableHttpServerConfig::default(),
        "stateless" => StreamableHttpServerConfig::default().with_legacy_session_mode(false),
        "json" => StreamableHttpServerConfig::default()
            .with_legacy_session_mode(false)
            .with_json_response(true),
        other => {
            eprintln!("unknown mode {other}");
            std::process::exit(2);
        }
    };
    let counts: Counts = Arc::default();
    let made = counts.clone();
    let service: StreamableHttpService<Tools, LocalSessionManager> = StreamableHttpService::new(
        move || Ok(Tools { counts: made.clone(), tool_router: Tools::tool_router() }),
        Default::default(),
        config,
    );
    let read = counts.clone();
    let router = axum::Router::new()
        .nest_service("/mcp", service)
        .route("/count", axum::routing::get(move || async move { axum::Json(read.lock().unwrap().clone()) }));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    println!("READY {}", listener.local_addr()?.port());
    axum::serve(listener, router).await
}
