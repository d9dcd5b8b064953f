//! perfcast-predict: the light predictor (being assembled; see issue 22).
