//! The conformance matrix's server on rmcp (the Rust SDK): the same five tools as every server of the
//! matrix, each execution counted, the counts read at GET /count.
//!
//!     conformance-rust MODE    MODE: session (rmcp's default: session ids, a priming event on
//!                              each stream) | stateless | json (stateless, JSON answers) |
//!                              tasks (as session, each tool run as a task, SEP-2663, for a client
//!                              that declares the tasks extension: rmcp's TaskManager)
//!
//! It listens on 127.0.0.1 (a free port) and prints "READY <port>" once it accepts connections.
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use rmcp::handler::server::{router::tool::ToolRouter, tool::ToolCallContext, wrapper::Parameters};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, CancelTaskParams, ContentBlock, CreateTaskResult,
    GetTaskParams, GetTaskResult, ServerCapabilities, ServerConfig, UpdateTaskParams,
};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::task_manager::{TaskExit, TaskManager, TaskOptions};
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
    tasks: Option<TaskManager>, // the tasks mode's: one for the whole server, whichever session polls
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

// A task polls quickly: the clients honour the task's pollIntervalMs (rmcp's default is 1 s).
const POLL_INTERVAL_MS: u64 = 10;

#[tool_handler(router = self.tool_router)]
impl ServerHandler for Tools {
    fn get_info(&self) -> ServerConfig {
        let capabilities = ServerCapabilities::builder().enable_tools();
        if self.tasks.is_some() {
            ServerConfig::new(capabilities.enable_tasks().build())
        } else {
            ServerConfig::new(capabilities.build())
        }
    }

    /// The tool router's call, or in the tasks mode (the client declared the extension) the same
    /// call run as a task: its result, or its JSON-RPC error, is the task's terminal state.
    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let declared = context.client_capabilities().is_some_and(|caps| caps.supports_tasks());
        let Some(tasks) = self.tasks.as_ref().filter(|_| declared) else {
            return self.tool_router.call(ToolCallContext::new(self, request, context)).await;
        };
        let this = self.clone();
        let options = TaskOptions::new().with_poll_interval_ms(POLL_INTERVAL_MS);
        let task = tasks.spawn(options, move |_| {
            Box::pin(async move {
                match this.tool_router.call(ToolCallContext::new(&this, request, context)).await {
                    Ok(CallToolResponse::Complete(result)) => Ok(result),
                    Ok(_) => Err(TaskExit::Error(ErrorData::internal_error("no result", None))),
                    Err(error) => Err(TaskExit::Error(error)),
                }
            })
        });
        Ok(CallToolResponse::Task(CreateTaskResult::new(task)))
    }

    async fn get_task(
        &self,
        request: GetTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, ErrorData> {
        Ok(GetTaskResult::new(self.task_manager()?.get_task(&request.task_id)?))
    }

    async fn update_task(
        &self,
        request: UpdateTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.task_manager()?.update_task(&request.task_id, request.input_responses)
    }

    async fn cancel_task(
        &self,
        request: CancelTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.task_manager()?.cancel_task(&request.task_id)
    }
}

impl Tools {
    fn task_manager(&self) -> Result<&TaskManager, ErrorData> {
        self.tasks.as_ref().ok_or_else(|| ErrorData::method_not_found::<rmcp::model::GetTaskMethod>())
    }
}

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let mode = std::env::args().nth(1).unwrap_or_else(|| "session".into());
    let config = match mode.as_str() {
        "session" | "tasks" => StreamableHttpServerConfig::default(),
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
    let tasks = (mode == "tasks").then(TaskManager::new);
    let service: StreamableHttpService<Tools, LocalSessionManager> = StreamableHttpService::new(
        move || Ok(Tools { counts: made.clone(), tool_router: Tools::tool_router(), tasks: tasks.clone() }),
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
