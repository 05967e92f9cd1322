//! The control API's routes: one list that the router is built from
//! ([`super::server::router`]) and that docs/reference/control-api.md's route table is
//! generated from ([`route_table`]), so the two cannot disagree.

/// An endpoint of the control API (which handler answers).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Endpoint {
    /// Liveness.
    Healthz,
    /// The job's status.
    Job,
    /// Stop without a savepoint.
    Cancel,
    /// Checkpoint history.
    Checkpoints,
    /// Trigger a savepoint.
    TriggerSavepoint,
    /// A savepoint trigger's status.
    SavepointStatus,
    /// Prometheus / OpenMetrics text.
    Metrics,
}

/// An HTTP method the API uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Method {
    /// `GET`.
    Get,
    /// `POST`.
    Post,
}

impl Method {
    /// The method's name (`GET`, `POST`).
    pub fn name(self) -> &'static str {
        match self {
            Method::Get => "GET",
            Method::Post => "POST",
        }
    }
}

/// Whether a route needs the job secret as a bearer token.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RouteAuth {
    /// Open to anyone who reaches the port.
    Open,
    /// `Authorization: Bearer <job secret>` required.
    Token,
    /// Open, unless the process runs with `--metrics-auth`.
    TokenWithMetricsAuth,
}

/// One route: method, path (axum syntax, `{id}` a path parameter), auth and its contract.
#[derive(Clone, Copy, Debug)]
pub struct Route {
    /// Which handler answers.
    pub endpoint: Endpoint,
    /// The HTTP method.
    pub method: Method,
    /// The path.
    pub path: &'static str,
    /// Bearer token needed or not.
    pub auth: RouteAuth,
    /// The request body (empty: none).
    pub body: &'static str,
    /// What a successful call and its documented errors answer.
    pub reply: &'static str,
}

/// Every route of the control API, in the order of the reference table.
pub const ROUTES: &[Route] = &[
    Route {
        endpoint: Endpoint::Healthz,
        method: Method::Get,
        path: "/healthz",
        auth: RouteAuth::Open,
        body: "",
        reply: "`200 ok` while the process serves",
    },
    Route {
        endpoint: Endpoint::Job,
        method: Method::Get,
        path: "/v1/job",
        auth: RouteAuth::Token,
        body: "",
        reply: "`JobStatus`",
    },
    Route {
        endpoint: Endpoint::Cancel,
        method: Method::Post,
        path: "/v1/job/cancel",
        auth: RouteAuth::Token,
        body: "",
        reply: "`202 {}`: the job stops without a savepoint, as on SIGTERM (`weir cancel`); `409` when it is already ending or ended",
    },
    Route {
        endpoint: Endpoint::Checkpoints,
        method: Method::Get,
        path: "/v1/checkpoints",
        auth: RouteAuth::Token,
        body: "",
        reply: "`CheckpointHistory`",
    },
    Route {
        endpoint: Endpoint::TriggerSavepoint,
        method: Method::Post,
        path: "/v1/savepoints",
        auth: RouteAuth::Token,
        body: "`SavepointRequest` (optional)",
        reply: "`202 {\"triggerId\": \"...\"}`; `409` if the job is not `RUNNING`; `422` for a body that is not a `SavepointRequest`",
    },
    Route {
        endpoint: Endpoint::SavepointStatus,
        method: Method::Get,
        path: "/v1/savepoints/{triggerId}",
        auth: RouteAuth::Token,
        body: "",
        reply: "`SavepointStatus`; `404` for an unknown trigger",
    },
    Route {
        endpoint: Endpoint::Metrics,
        method: Method::Get,
        path: "/metrics",
        auth: RouteAuth::TokenWithMetricsAuth,
        body: "",
        reply: "Prometheus / OpenMetrics text (docs/reference/metrics.md)",
    },
];

/// The Markdown route table of docs/reference/control-api.md (header, separator, one row per
/// route of [`ROUTES`]), each line ending in a newline.
pub fn route_table() -> String {
    let mut out = String::from("| method | path | bearer token | body | reply |\n|---|---|---|---|---|\n");
    for r in ROUTES {
        let auth = match r.auth {
            RouteAuth::Open => "no",
            RouteAuth::Token => "yes",
            RouteAuth::TokenWithMetricsAuth => "with `--metrics-auth`",
        };
        out.push_str(&format!(
            "| {} | `{}` | {auth} | {} | {} |\n",
            r.method.name(),
            r.path,
            r.body,
            r.reply
        ));
    }
    out
}
