//! Loading a component: its bytes ([`Module`]) compiled by the engine, or taken from what
//! it has compiled before, sorted into the world it implements, linked against the host's
//! imports, and, for a hooks component, asked which functions it serves.

use std::path::Path;
use std::sync::Arc;

use wasmtime::component::Component;
use wasmtime::component::types::ComponentItem;

use super::ahead::Ahead;
use super::bindings::{
    hooks::HooksPre, hooks2::HooksPre as Hooks2Pre, package::PackagePre, reconciler::ReconcilerPre,
    reconciler2::ReconcilerPre as Reconciler2Pre,
};
use super::cache;
use super::engine::Engine;
use super::error::{CallError, CallFailure, LoadError};
use super::guest::Pre;
use super::id::PluginId;
use super::plugin::{Inner, Plugin, PluginInfo, World};
use super::reuse::Instances;

/// A component's bytes and their sha256, computed once, when the value is made, and never
/// apart from the bytes: what a fetch hands to [`Engine::load_module`], so that a load does
/// not hash again what the fetch hashed to name or verify it. The digest keys the compile
/// cache, so it can only come from the bytes themselves.
#[derive(Clone)]
pub struct Module {
    bytes: Vec<u8>,
    digest: String,
}

impl Module {
    /// `bytes` and their sha256.
    pub fn new(bytes: Vec<u8>) -> Self {
        let digest = cache::sha256_hex(&bytes);
        Module { bytes, digest }
    }

    /// The component's bytes.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// Lowercase hex sha256 of the bytes.
    pub fn digest(&self) -> &str {
        &self.digest
    }

    /// `sha256:<hex>` of the bytes.
    pub fn digest_ref(&self) -> String {
        format!("sha256:{}", self.digest)
    }

    /// Size in bytes.
    pub fn len(&self) -> usize {
        self.bytes.len()
    }

    /// Whether there are no bytes.
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }
}

impl std::fmt::Debug for Module {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Module")
            .field("size", &self.bytes.len())
            .field("digest", &self.digest)
            .finish()
    }
}

/// Loading lives here, beside what it makes, so the engine need not know plugins.
impl Engine {
    /// Loads a component from a file; the plugin is named after the file stem.
    ///
    /// # Errors
    /// [`LoadError`] when the file cannot be read, compiled or linked.
    pub fn load_file(&self, path: &Path) -> Result<Plugin, LoadError> {
        let bytes = std::fs::read(path).map_err(|source| LoadError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        let name = path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| "plugin".to_string());
        self.load(&name, &bytes)
    }

    /// Loads a component from bytes: from memory if this digest was loaded before, else
    /// from the compile cache, else by compiling it (and filling the cache).
    ///
    /// # Errors
    /// [`LoadError`] when the bytes cannot be compiled or linked, or export no known world.
    pub fn load(&self, name: &str, bytes: &[u8]) -> Result<Plugin, LoadError> {
        self.load_digested(name, bytes, cache::sha256_hex(bytes))
    }

    /// [`Engine::load`] of a [`Module`], whose digest was computed when it was made: the
    /// load hashes nothing again (18 MB take ~15 ms to hash).
    ///
    /// # Errors
    /// As [`Engine::load`].
    pub fn load_module(&self, name: &str, module: &Module) -> Result<Plugin, LoadError> {
        self.load_digested(name, &module.bytes, module.digest.clone())
    }

    fn load_digested(&self, name: &str, bytes: &[u8], digest: String) -> Result<Plugin, LoadError> {
        let id = PluginId {
            name: name.to_string(),
            digest,
        };
        let component = self.component(&id, bytes)?;
        Plugin::new(self.clone(), Arc::new(id), component, bytes.len())
    }
}

impl Plugin {
    /// A loaded plugin: `component` sorted into its world, linked against the host's
    /// imports, and (for a hooks component) asked which functions it serves.
    pub(super) fn new(
        engine: Engine,
        id: Arc<PluginId>,
        component: Component,
        size: usize,
    ) -> Result<Self, LoadError> {
        let ty = component.component_type();
        let wt = engine.wasmtime();
        let exports: Vec<String> = ty
            .exports(wt)
            .filter(|(_, item)| matches!(item.ty, ComponentItem::ComponentFunc(_)))
            .map(|(name, _)| name.to_string())
            .collect();
        let imports: Vec<String> = ty.imports(wt).map(|(name, _)| name.to_string()).collect();
        let world = world_of(&exports, &id)?;
        let pre = link(&engine, &component, world, &id)?;
        let image = component.image_range();
        let info = PluginInfo {
            name: id.name.clone(),
            sha256: id.digest_ref(),
            size,
            compiled_size: (image.end as usize).saturating_sub(image.start as usize),
            world,
            contract: pre.contract(),
            exports,
            functions: Vec::new(),
            imports,
        };
        let mut plugin = Plugin {
            inner: Arc::new(Inner {
                engine,
                id,
                pre,
                info,
                kept: Instances::default(),
                ahead: Ahead::default(),
            }),
        };
        if world == World::Hooks {
            let functions = plugin.ask_functions().map_err(|e| LoadError::Functions {
                plugin: (*plugin.inner.id).clone(),
                source: Box::new(e),
            })?;
            if let Some(inner) = Arc::get_mut(&mut plugin.inner) {
                inner.info.functions = functions;
            }
        }
        Ok(plugin)
    }

    /// The functions a hooks component serves. Loading is synchronous: the call runs on a
    /// runtime of its own, on a thread of its own, so its outer deadline holds (a guest
    /// asleep in a WASI wait is stopped) wherever the load is called from, with or without
    /// a runtime around it.
    fn ask_functions(&self) -> Result<Vec<String>, CallError> {
        std::thread::scope(|scope| {
            scope
                .spawn(|| {
                    let runtime = tokio::runtime::Builder::new_current_thread()
                        .enable_time()
                        .build()
                        .map_err(|e| CallError {
                            plugin: (*self.inner.id).clone(),
                            failure: CallFailure::Host(e.into()),
                        })?;
                    // The operator's ceilings hold here too, not only for calls.
                    let limits = *self.inner.engine.load_limits();
                    runtime.block_on(self.call_functions(&limits))
                })
                .join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
        })
    }
}

/// The world a component implements, from the functions it exports.
fn world_of(exports: &[String], id: &PluginId) -> Result<World, LoadError> {
    let has = |n: &str| exports.iter().any(|e| e == n);
    if has("reconcile") {
        Ok(World::Reconciler)
    } else if has("functions") && has("call") {
        Ok(World::Hooks)
    } else if ["validate", "identity", "observe", "converge", "delete"]
        .iter()
        .all(|f| has(f))
    {
        Ok(World::Package)
    } else {
        Err(LoadError::UnknownWorld {
            plugin: id.clone(),
            exports: if exports.is_empty() {
                "nothing".into()
            } else {
                exports.join(", ")
            },
        })
    }
}

/// `component` linked against the host's imports, typed as the `world` it implements. A
/// `reconciler` or `hooks` export typed as 0.1.0 has it; else it may be 0.2.0's (its
/// outcome has more fields). The error told is the 0.2.0 one: the newest.
fn link(
    engine: &Engine,
    component: &Component,
    world: World,
    id: &PluginId,
) -> Result<Pre, LoadError> {
    let unlinked = |source| LoadError::Link {
        plugin: id.clone(),
        source,
    };
    let instance_pre = engine
        .linker()
        .instantiate_pre(component)
        .map_err(unlinked)?;
    Ok(match world {
        World::Reconciler => match ReconcilerPre::new(instance_pre.clone()) {
            Ok(pre) => Pre::Reconciler(pre),
            Err(_) => Pre::Reconciler2(Reconciler2Pre::new(instance_pre).map_err(unlinked)?),
        },
        World::Hooks => match HooksPre::new(instance_pre.clone()) {
            Ok(pre) => Pre::Hooks(pre),
            Err(_) => Pre::Hooks2(Hooks2Pre::new(instance_pre).map_err(unlinked)?),
        },
        World::Package => Pre::Package(PackagePre::new(instance_pre).map_err(unlinked)?),
    })
}
