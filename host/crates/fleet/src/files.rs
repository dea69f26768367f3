//! File tenants: the `--blueprint` file or directory and each file of `--tenants`, read,
//! fingerprinted and reloaded when their text changes.

use crate::state::*;

/// Hash of text, to tell whether a source changed.
pub(super) fn fingerprint(text: &str) -> u64 {
    let mut h = DefaultHasher::new();
    text.hash(&mut h);
    h.finish()
}

/// Every `*.yaml`/`*.yml` file directly in `dir`, in name order.
pub(super) fn yaml_files(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.is_file() && p.extension().is_some_and(|e| e == "yaml" || e == "yml"))
        .collect();
    files.sort();
    Ok(files)
}

/// The text of a file source (every YAML file of a directory, in order).
pub(super) fn source_text(path: &Path) -> std::io::Result<String> {
    if path.is_dir() {
        let mut text = String::new();
        for file in yaml_files(path)? {
            text.push_str(&file.display().to_string());
            text.push('\n');
            text.push_str(&std::fs::read_to_string(&file)?);
        }
        Ok(text)
    } else {
        std::fs::read_to_string(path)
    }
}

impl Fleet {
    /// Loads the `--blueprint` tenant, so a broken Blueprint stops the host before it
    /// waits for a lease or starts anything.
    ///
    /// # Errors
    /// [`FleetError::Blueprint`] with every problem found.
    pub async fn load_initial(&self) -> Result<(), FleetError> {
        let Some(path) = self.options.blueprint.clone() else {
            return Ok(());
        };
        let source = TenantSource::File(path.clone());
        let mut tenant = self.new_tenant(source.clone());
        let text = source_text(&path).map_err(|e| {
            FleetError::Blueprint(BlueprintError::Read {
                path: path.clone(),
                source: e,
            })
        })?;
        let blueprint = blueprint::load(&path)?;
        tenant.acting = self
            .acting(&source, &tenant.acting, None, &blueprint)
            .await
            .map_err(FleetError::Identity)?;
        let assembly = self
            .assemble(&tenant.policy, &tenant.acting, blueprint)
            .await?;
        tenant.fingerprint = Some(fingerprint(&text));
        tenant.assembly = Some(Arc::new(assembly));
        self.publish(&tenant);
        self.tenants.lock().await.insert(source, tenant);
        Ok(())
    }

    /// Re-reads file tenants whose text changed.
    pub(super) async fn reload_files(self: &Arc<Self>) {
        if let Some(path) = self.options.blueprint.clone() {
            self.reload_file(path);
        }
        self.sync_tenant_files().await;
    }

    /// Queues a check of the file tenant at `path`.
    pub(super) fn reload_file(self: &Arc<Self>, path: PathBuf) {
        let source = TenantSource::File(path.clone());
        self.enqueue(source.clone(), move |fleet| async move {
            // Files are read off the async workers: a slow disk or a large directory
            // holds up no reconcile.
            let read = tokio::task::spawn_blocking({
                let path = path.clone();
                move || source_text(&path)
            });
            let Ok(Ok(text)) = read.await else {
                return;
            };
            let print = fingerprint(&text);
            if let Some(t) = fleet.tenants.lock().await.get(&source)
                && (t.fingerprint == Some(print) || t.failed == Some(print))
            {
                return;
            }
            let Ok(loaded) = tokio::task::spawn_blocking(move || blueprint::load(&path)).await
            else {
                return;
            };
            let _ = fleet.load_tenant(source, print, loaded).await;
        });
    }

    /// Adds, reloads and removes the tenants of the `--tenants` directory.
    pub(super) async fn sync_tenant_files(self: &Arc<Self>) {
        let Some(dir) = self.options.tenants.clone() else {
            return;
        };
        let listed = tokio::task::spawn_blocking({
            let dir = dir.clone();
            move || yaml_files(&dir)
        });
        let files = match listed
            .await
            .unwrap_or_else(|e| Err(std::io::Error::other(e)))
        {
            Ok(f) => f,
            Err(e) => {
                tracing::warn!(dir = %dir.display(), error = %e, "cannot read the tenants directory");
                return;
            }
        };
        for file in &files {
            self.reload_file(file.clone());
        }
        // The tenants the directory had, from the lanes (a tenant still loading has one).
        let gone: Vec<TenantSource> = self
            .lanes
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .keys()
            .filter(|s| match s {
                TenantSource::File(p) => p.parent() == Some(dir.as_path()) && !files.contains(p),
                TenantSource::Resource(_) => false,
            })
            .cloned()
            .collect();
        for source in gone {
            self.enqueue_removal(source);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_directory_source_is_its_yaml_files_in_name_order_each_named() {
        let dir = tempfile::tempdir().expect("tempdir");
        for (name, text) in [
            ("b.yml", "b: 1"),
            ("a.yaml", "a: 1"),
            ("c.txt", "no"),
            ("d.json", "{}"),
        ] {
            std::fs::write(dir.path().join(name), text).expect("write");
        }
        std::fs::create_dir(dir.path().join("e.yaml")).expect("a directory named like a file");
        let files = yaml_files(dir.path()).expect("list");
        let names: Vec<_> = files
            .iter()
            .map(|f| f.file_name().and_then(|n| n.to_str()).unwrap_or_default())
            .collect();
        assert_eq!(names, ["a.yaml", "b.yml"]);
        let text = source_text(dir.path()).expect("read");
        let a = dir.path().join("a.yaml").display().to_string();
        let b = dir.path().join("b.yml").display().to_string();
        assert_eq!(text, format!("{a}\na: 1{b}\nb: 1"));
        // Renaming a file changes the directory's text, so its fingerprint too.
        let before = fingerprint(&text);
        std::fs::rename(dir.path().join("b.yml"), dir.path().join("z.yml")).expect("rename");
        assert_ne!(fingerprint(&source_text(dir.path()).expect("read")), before);
        assert_eq!(
            source_text(&dir.path().join("a.yaml")).expect("a file"),
            "a: 1"
        );
    }
}
