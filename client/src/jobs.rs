//! One-shot jobs.

use std::time::Duration;

use reqwest::Method;
use sless_api_types::{CreateJob, JobList, JobView, Removed};

use crate::error::{Error, Result};
use crate::events::EventFilter;
use crate::http::{Body, Call};
use crate::pages::{PageQuery, every_page};
use crate::{Client, Tagged};

impl Client {
    /// `POST /jobs`: it runs next (`Pending`).
    pub async fn create_job(&self, req: &CreateJob) -> Result<Tagged<JobView>> {
        let path = self.in_namespace("/jobs");
        self.tagged(Call::new(Method::POST, &path).body(Body::json(req)?))
            .await
    }

    /// `GET /jobs`: every job users asked for, by name, without their
    /// output (every page, followed).
    pub async fn list_jobs(&self) -> Result<JobList> {
        every_page(|q| async move { self.list_jobs_page(&q).await }).await
    }

    /// `GET /jobs`: one page, by name.
    pub async fn list_jobs_page(&self, query: &PageQuery) -> Result<JobList> {
        let path = self.in_namespace("/jobs");
        self.json(query.on(Call::get(&path))).await
    }

    /// `GET /jobs/{name}`: its status and, once it ended, its output.
    pub async fn get_job(&self, name: &str) -> Result<Tagged<JobView>> {
        self.tagged(Call::get(&self.in_namespace(&format!("/jobs/{name}"))))
            .await
    }

    /// `DELETE /jobs/{name}`: a running job is stopped.
    pub async fn delete_job(&self, name: &str) -> Result<Removed> {
        let path = self.in_namespace(&format!("/jobs/{name}"));
        self.json(Call::new(Method::DELETE, &path)).await
    }

    /// Waits until the job has ended (`Succeeded` or `Failed`), following
    /// the audit log of its stream rather than asking again and again;
    /// an [`Error::Timeout`] once `within` has passed.
    pub async fn wait_for_job(&self, name: &str, within: Duration) -> Result<JobView> {
        let deadline = tokio::time::Instant::now() + within;
        let timed_out = || Error::Timeout {
            endpoint: self.endpoint().to_owned(),
            seconds: within.as_secs(),
        };
        let stream = match (
            sless_domain::Namespace::parse(self.namespace()),
            sless_domain::JobName::parse(name),
        ) {
            (Ok(ns), Ok(job)) => sless_domain::job::stream(&ns, &job),
            _ => return Err(Error::Invalid(format!("{name:?} is not a job's name"))),
        };
        let filter = EventFilter {
            stream: Some(stream),
            ..EventFilter::default()
        };
        // Following before reading: an end that commits in between is
        // still seen.
        let mut tail = tokio::time::timeout_at(deadline, self.tail_events(&filter))
            .await
            .map_err(|_| timed_out())??;
        loop {
            // A job's document is read from the log when its read model
            // lags, so an ended job reads as ended.
            let job = self.get_job(name).await?.doc;
            if job.status == "Succeeded" || job.status == "Failed" {
                return Ok(job);
            }
            tail.next_by(deadline, within).await?;
        }
    }
}
