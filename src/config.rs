//! Configuration: the fields of config.toml, their defaults (config.toml
//! itself is compiled in), command-line overrides, and the subset CONFIG
//! GET/SET can see.

use std::path::PathBuf;

use clap::Parser;
use serde::Deserialize;

/// The default configuration: the repository's config.toml, compiled in so
/// the binary and the documented file can never disagree.
pub const DEFAULT_TOML: &str = include_str!("../config.toml");

/// When commits reach the disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Durability {
    /// Every commit is durable before its replies are sent.
    Always,
    /// Commits are made durable once a second.
    Everysec,
    /// Commits are made durable every 30 seconds.
    No,
}

impl Durability {
    /// The name used in config.toml and CONFIG GET.
    pub fn name(self) -> &'static str {
        match self {
            Durability::Always => "always",
            Durability::Everysec => "everysec",
            Durability::No => "no",
        }
    }

    /// Parses a config value.
    pub fn parse(s: &str) -> Option<Durability> {
        match s.to_ascii_lowercase().as_str() {
            "always" => Some(Durability::Always),
            "everysec" => Some(Durability::Everysec),
            "no" => Some(Durability::No),
            _ => None,
        }
    }
}

/// The durability policy in force: the shards read it at every commit,
/// and CONFIG SET appendfsync changes it while the server runs.
#[derive(Debug)]
pub struct DurabilityCell(std::sync::atomic::AtomicU8);

impl DurabilityCell {
    /// A cell holding `d`.
    pub fn new(d: Durability) -> DurabilityCell {
        DurabilityCell(std::sync::atomic::AtomicU8::new(d as u8))
    }

    /// The policy now.
    pub fn get(&self) -> Durability {
        match self.0.load(std::sync::atomic::Ordering::Relaxed) {
            0 => Durability::Always,
            1 => Durability::Everysec,
            _ => Durability::No,
        }
    }

    /// Applies `d` to the commits from now on.
    pub fn set(&self, d: Durability) {
        self.0.store(d as u8, std::sync::atomic::Ordering::Relaxed);
    }
}

/// The server configuration.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Listen address.
    pub bind: String,
    /// Listen port (0 = any free port, for tests).
    pub port: u16,
    /// Data directory.
    pub dir: PathBuf,
    /// Number of shards; 0 = number of CPUs.
    pub shards: usize,
    /// Durability policy.
    pub durability: Durability,
    /// redb cache per shard in MiB.
    pub cache_mb: usize,
    /// Write buffers per shard in MiB (rows committed but not yet in the
    /// redb file); writers slow down as they fill. A busy shard may borrow
    /// idle shards' share, up to twice its own (`storage::budget`).
    pub write_buffer_mb: usize,
    /// Ops per write transaction at most.
    pub max_batch: usize,
    /// Default log level.
    pub log_level: String,
    /// Password for AUTH; empty = none.
    pub requirepass: String,
    /// Largest accepted bulk string.
    pub proto_max_bulk_len: u64,
    /// Connection limit.
    pub maxclients: usize,
    /// Redis parameters by their CONFIG names (the `[redis]` table),
    /// applied at start; CONFIG REWRITE writes changed ones back here.
    #[serde(default)]
    pub redis: toml::Table,
    /// Cluster mode (the `[cluster]` table).
    pub cluster: ClusterConfig,
    /// The file this configuration was read from (CONFIG REWRITE's target);
    /// `None` for the built-in defaults.
    #[serde(skip)]
    pub file: Option<PathBuf>,
}

/// The `[cluster]` table: Redis Cluster mode, its topology kept in etcd.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClusterConfig {
    /// Serve as a Redis Cluster node (Redis's `cluster-enabled`).
    pub enabled: bool,
    /// etcd client endpoints (`host:port`) holding the topology; empty = a
    /// cluster of this node alone, its topology kept in the data directory.
    pub etcd_endpoints: Vec<String>,
    /// Prefix of this cluster's keys in etcd, so clusters can share one.
    pub name: String,
    /// Address other nodes and clients are told to use; empty = the bind
    /// address (Redis's `cluster-announce-ip`).
    pub announce_ip: String,
    /// Client port announced; 0 = the listening port.
    pub announce_port: u16,
    /// Cluster bus port announced; 0 = the client port + 10000. cairn has no
    /// bus of its own (etcd carries the topology): the port is only shown.
    pub announce_bus_port: u16,
}

/// Errors loading the configuration.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read config file {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file is not valid TOML or has an unknown / ill-typed field.
    #[error("invalid config {origin}: {message}")]
    Parse {
        /// Which file.
        origin: String,
        /// What toml said.
        message: String,
    },
    /// A value out of its bounds.
    #[error("invalid config value: {0}")]
    Bounds(String),
}

/// Command-line flags; each overrides the config file's field.
#[derive(Debug, Default, Parser)]
#[command(
    name = "cairn",
    version,
    about = "A disk-backed, Redis-compatible server"
)]
pub struct Flags {
    /// Config file to load (defaults: ./config.toml if present, else built-in).
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Port to listen on.
    #[arg(long)]
    pub port: Option<u16>,
    /// Address to bind.
    #[arg(long)]
    pub bind: Option<String>,
    /// Data directory.
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// Number of shards (0 = CPUs).
    #[arg(long)]
    pub shards: Option<usize>,
    /// always | everysec | no.
    #[arg(long)]
    pub durability: Option<String>,
    /// Load this RDB file (written by Redis or by cairn's SAVE) into the
    /// data directory, then exit instead of serving.
    #[arg(long, value_name = "FILE.rdb")]
    pub import: Option<PathBuf>,
    /// yes | no: serve as a Redis Cluster node (as Redis's flag).
    #[arg(long, value_name = "yes|no")]
    pub cluster_enabled: Option<String>,
    /// no | yes | local: allow DEBUG (local: from loopback clients only),
    /// as Redis's flag; sets `enable-debug-command` of the `[redis]` table.
    #[arg(long, value_name = "no|yes|local")]
    pub enable_debug_command: Option<String>,
}

impl Config {
    /// The compiled-in defaults.
    pub fn defaults() -> Config {
        Config::from_toml(DEFAULT_TOML, "built-in defaults").expect("built-in config.toml is valid")
    }

    /// Parses a full or partial TOML document over the defaults.
    pub fn from_toml(text: &str, origin: &str) -> Result<Config, ConfigError> {
        let parse_err = |e: toml::de::Error| ConfigError::Parse {
            origin: origin.to_string(),
            message: e.to_string(),
        };
        let mut base: toml::Table = DEFAULT_TOML.parse().map_err(parse_err)?;
        let over: toml::Table = text.parse().map_err(parse_err)?;
        for (k, v) in over {
            // A partial [cluster] table keeps the defaults of the fields it
            // leaves out.
            match (base.get_mut(&k), v) {
                (Some(toml::Value::Table(b)), toml::Value::Table(o)) if k == "cluster" => {
                    b.extend(o);
                }
                (_, v) => {
                    base.insert(k, v);
                }
            }
        }
        let mut cfg: Config = toml::Value::Table(base).try_into().map_err(parse_err)?;
        // Redis's name for it, in [redis], wins over the top-level key.
        if let Some(v) = cfg.redis.get("appendfsync") {
            let text = v.as_str().unwrap_or_default();
            cfg.durability = Durability::parse(text).ok_or_else(|| {
                ConfigError::Bounds(format!("[redis] appendfsync '{text}' (always|everysec|no)"))
            })?;
        }
        cfg.validate()?;
        Ok(cfg)
    }

    /// Loads the file the flags name (or ./config.toml) and applies the flags.
    pub fn load(flags: &Flags) -> Result<Config, ConfigError> {
        let path = match &flags.config {
            Some(p) => Some(p.clone()),
            None => Some(PathBuf::from("config.toml")).filter(|p| p.exists()),
        };
        let mut cfg = match path {
            Some(path) => {
                let text = std::fs::read_to_string(&path).map_err(|source| ConfigError::Read {
                    path: path.clone(),
                    source,
                })?;
                let mut cfg = Config::from_toml(&text, &path.display().to_string())?;
                cfg.file = Some(path);
                cfg
            }
            None => Config::defaults(),
        };
        if let Some(p) = flags.port {
            cfg.port = p;
        }
        if let Some(b) = &flags.bind {
            cfg.bind = b.clone();
        }
        if let Some(d) = &flags.dir {
            cfg.dir = d.clone();
        }
        if let Some(s) = flags.shards {
            cfg.shards = s;
        }
        if let Some(d) = &flags.durability {
            cfg.durability = Durability::parse(d).ok_or_else(|| {
                ConfigError::Bounds(format!("durability '{d}' (always|everysec|no)"))
            })?;
            cfg.redis.remove("appendfsync");
        }
        if let Some(v) = &flags.cluster_enabled {
            cfg.cluster.enabled = match v.to_ascii_lowercase().as_str() {
                "yes" | "true" => true,
                "no" | "false" => false,
                _ => {
                    return Err(ConfigError::Bounds(format!(
                        "cluster-enabled '{v}' (yes|no)"
                    )))
                }
            };
        }
        if let Some(v) = &flags.enable_debug_command {
            cfg.redis
                .insert("enable-debug-command".into(), v.clone().into());
        }
        cfg.validate()?;
        Ok(cfg)
    }

    fn validate(&self) -> Result<(), ConfigError> {
        if self.shards > 1024 {
            return Err(ConfigError::Bounds("shards must be at most 1024".into()));
        }
        if self.max_batch == 0 {
            return Err(ConfigError::Bounds("max_batch must be at least 1".into()));
        }
        if self.cache_mb == 0 {
            return Err(ConfigError::Bounds("cache_mb must be at least 1".into()));
        }
        if self.write_buffer_mb == 0 {
            return Err(ConfigError::Bounds(
                "write_buffer_mb must be at least 1".into(),
            ));
        }
        crate::families::config::initial_values(self).map_err(ConfigError::Bounds)?;
        Ok(())
    }

    /// The effective shard count.
    pub fn shard_count(&self) -> usize {
        if self.shards == 0 {
            crate::util::cores()
        } else {
            self.shards
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_parse_and_overrides_apply() {
        let d = Config::defaults();
        assert_eq!(d.port, 6379);
        assert_eq!(d.durability, Durability::Everysec);
        // Redis's appendfsync in [redis] wins over the top-level key.
        let r = Config::from_toml(
            "durability = \"no\"\n[redis]\nappendfsync = \"always\"",
            "test",
        )
        .unwrap();
        assert_eq!(r.durability, Durability::Always);
        let c = Config::from_toml("port = 7000\ndurability = \"always\"", "test").unwrap();
        assert_eq!(c.port, 7000);
        assert_eq!(c.durability, Durability::Always);
        assert_eq!(c.bind, "127.0.0.1");
        assert!(Config::from_toml("nosuch = 1", "test").is_err());
        assert!(Config::from_toml("durability = \"sometimes\"", "test").is_err());
        assert!(!d.cluster.enabled);
        let c = Config::from_toml("[cluster]\nenabled = true", "test").unwrap();
        assert!(c.cluster.enabled);
        assert_eq!(c.cluster.name, "cairn");
    }

    #[test]
    fn the_debug_flag_sets_the_redis_parameter() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("config.toml");
        std::fs::write(&file, "").unwrap();
        let flags = |v: &str| Flags {
            config: Some(file.clone()),
            enable_debug_command: Some(v.into()),
            ..Default::default()
        };
        let c = Config::load(&flags("local")).unwrap();
        assert_eq!(c.redis["enable-debug-command"].as_str(), Some("local"));
        assert!(Config::load(&flags("sometimes")).is_err());
    }
}
