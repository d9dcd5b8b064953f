//! Hyper-parameters behind one interface: [`FamilyParams`], what every family's parameters
//! implement, and [`ModelParams`], any of them. The table of families ([`crate::registry`])
//! names them, so a family's file depends on this one and not on the table.

use std::any::Any;
use std::sync::Arc;

use perfcast_core::progress::Observer;
use serde::de::DeserializeOwned;
use serde::{Serialize, Serializer};

use crate::error::Result;
use crate::features::TrainSet;
use crate::regressor::{Fit, Regressor};

/// Hyper-parameters of a family: validated and fitted ([`Fit`]), read and written through
/// their serde form (`--set` edits it), compared, and named.
pub trait FamilyParams:
    Fit + Serialize + DeserializeOwned + Clone + PartialEq + std::fmt::Debug + Send + Sync + 'static
{
    /// The family these parameters fit (`trees`; `mlp` for MEDN parameters without
    /// multi-task; `trees-xdev` for a cross-device wrapper).
    fn name(&self) -> &'static str;

    /// Hands an observer to a family that trains for long and reports its epochs (MEDN and
    /// the MLP, stage [`crate::medn::EPOCHS`]). Default: ignored.
    fn set_observer(&mut self, _observer: Arc<dyn Observer>) {}

    /// How the family predicts devices it never measured; its row in the table of families
    /// says the same (a test holds them together). Default: wrapped.
    fn cross_device(&self) -> CrossDevice {
        CrossDevice::Wrap
    }
}

/// How a family predicts devices it never measured.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CrossDevice {
    /// `<family>-xdev`: wrapped by the cross-device wrapper (device block, roofline-normalised
    /// targets), and wrapped whenever the training rows come from several devices.
    Wrap,
    /// Reads the device columns itself (roofline, `util`, a wrapper): never wrapped, and
    /// `<family>-xdev` names the family itself.
    Itself,
}

/// A family with its hyper-parameters: fits into a `Box<dyn Regressor>`. Built from the
/// registry ([`ModelParams::by_name`]) or from any [`FamilyParams`] ([`ModelParams::new`]).
///
/// The serde form is the parameters' own, with the family's name as `model`.
pub struct ModelParams(Box<dyn DynParams>);

impl ModelParams {
    /// These parameters behind the common interface.
    pub fn new<P: FamilyParams>(params: P) -> ModelParams {
        ModelParams(Box::new(params))
    }

    /// Family name.
    pub fn name(&self) -> &'static str {
        self.0.name()
    }

    /// Checks the hyper-parameters; errors carry the bad value.
    pub fn validate(&self) -> Result<()> {
        self.0.validate()
    }

    /// Fits on `data` (validating first).
    pub fn fit(&self, data: &TrainSet) -> Result<Box<dyn Regressor>> {
        self.0.fit(data)
    }

    /// Whether these parameters can be wrapped for cross-device fitting: their family is
    /// [`CrossDevice::Wrap`] (a wrapper itself is not).
    pub fn wraps(&self) -> bool {
        self.0.cross_device() == CrossDevice::Wrap
    }

    /// Hands an observer to the families that train for long ([`FamilyParams::set_observer`]).
    pub fn set_observer(&mut self, observer: Arc<dyn Observer>) {
        self.0.set_observer(observer);
    }

    /// Whether the parameters are a `P`.
    pub fn is<P: FamilyParams>(&self) -> bool {
        self.0.as_any().is::<P>()
    }

    /// The parameters, when they are a `P`.
    pub fn downcast_ref<P: FamilyParams>(&self) -> Option<&P> {
        self.0.as_any().downcast_ref()
    }

    /// The parameters, mutably, when they are a `P`.
    pub fn downcast_mut<P: FamilyParams>(&mut self) -> Option<&mut P> {
        self.0.as_any_mut().downcast_mut()
    }
}

impl Clone for ModelParams {
    fn clone(&self) -> ModelParams {
        ModelParams(self.0.clone_box())
    }
}

impl std::fmt::Debug for ModelParams {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(&self.0, f)
    }
}

impl PartialEq for ModelParams {
    fn eq(&self, other: &ModelParams) -> bool {
        self.0.eq_any(other.0.as_any())
    }
}

impl Serialize for ModelParams {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        use serde::ser::Error as _;
        let mut value = self.0.to_value().map_err(S::Error::custom)?;
        if let Some(fields) = value.as_object_mut() {
            fields.insert("model".into(), self.name().into());
        }
        value.serialize(s)
    }
}

impl ModelParams {
    /// The serde form of these parameters (without the `model` tag).
    pub(crate) fn to_value(&self) -> serde_json::Result<serde_json::Value> {
        self.0.to_value()
    }

    /// Parameters of the same family from a serde form.
    pub(crate) fn reparse(&self, value: serde_json::Value) -> serde_json::Result<ModelParams> {
        self.0.reparse(value)
    }
}

/// Parameters of family `P` from their serde form.
pub(crate) fn parse<P: FamilyParams>(value: serde_json::Value) -> serde_json::Result<ModelParams> {
    Ok(ModelParams::new(P::deserialize(value)?))
}

/// The object-safe face of [`FamilyParams`].
trait DynParams: std::fmt::Debug + Send + Sync {
    fn name(&self) -> &'static str;
    fn validate(&self) -> Result<()>;
    fn fit(&self, data: &TrainSet) -> Result<Box<dyn Regressor>>;
    fn set_observer(&mut self, observer: Arc<dyn Observer>);
    fn cross_device(&self) -> CrossDevice;
    fn to_value(&self) -> serde_json::Result<serde_json::Value>;
    /// Parameters of the same type from a serde form.
    fn reparse(&self, value: serde_json::Value) -> serde_json::Result<ModelParams>;
    fn clone_box(&self) -> Box<dyn DynParams>;
    fn eq_any(&self, other: &dyn Any) -> bool;
    fn as_any(&self) -> &dyn Any;
    fn as_any_mut(&mut self) -> &mut dyn Any;
}

impl<P: FamilyParams> DynParams for P {
    fn name(&self) -> &'static str {
        FamilyParams::name(self)
    }
    fn validate(&self) -> Result<()> {
        Fit::validate(self)
    }
    fn fit(&self, data: &TrainSet) -> Result<Box<dyn Regressor>> {
        Ok(Box::new(Fit::fit(self, data)?))
    }
    fn set_observer(&mut self, observer: Arc<dyn Observer>) {
        FamilyParams::set_observer(self, observer);
    }
    fn cross_device(&self) -> CrossDevice {
        FamilyParams::cross_device(self)
    }
    fn to_value(&self) -> serde_json::Result<serde_json::Value> {
        serde_json::to_value(self)
    }
    fn reparse(&self, value: serde_json::Value) -> serde_json::Result<ModelParams> {
        parse::<P>(value)
    }
    fn clone_box(&self) -> Box<dyn DynParams> {
        Box::new(self.clone())
    }
    fn eq_any(&self, other: &dyn Any) -> bool {
        other.downcast_ref::<P>() == Some(self)
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
}
